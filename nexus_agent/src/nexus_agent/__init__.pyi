# The public names of nexus_agent, written once: type checkers read these imports, and
# __init__.py reads this same file (lazy_loader.attach_stub) to import each name on first use.

from ._events import AgentEvent as AgentEvent
from ._events import AgentResult as AgentResult
from ._events import ModelResponded as ModelResponded
from ._events import StopReason as StopReason
from ._events import StoppedCall as StoppedCall
from ._events import TaskStopped as TaskStopped
from ._events import TextDelta as TextDelta
from ._events import ToolCallFinished as ToolCallFinished
from ._events import ToolCallStarted as ToolCallStarted
from ._plugin import AgentPlugin as AgentPlugin
from ._session import Session as Session
from ._settings import DEFAULT_SYSTEM_PROMPT as DEFAULT_SYSTEM_PROMPT
from ._settings import PLUGIN_ID as PLUGIN_ID
from ._settings import Settings as Settings
from ._transcript import read_transcript as read_transcript
