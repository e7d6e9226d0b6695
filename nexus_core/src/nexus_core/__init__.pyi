# The public surface of nexus_core, written once: type checkers and IDEs read these imports, and
# __init__.py reads this same file (lazy_loader.attach_stub) to import each name on first use.
# Everything else lives in a namespace: nexus_core.adapters, .content, .llm, .plugins, .skills,
# .terminal, .testing, .wire, .cli. Only `from .module import Name as Name` lines belong here.

from ._cancel import CancelToken as CancelToken
from ._config import ConfigError as ConfigError
from ._durability import Durability as Durability
from ._markers import hookimpl as hookimpl
from ._markers import hookspec as hookspec
from ._models import Answer as Answer
from ._models import Ask as Ask
from ._models import CallContext as CallContext
from ._models import Question as Question
from ._models import Rewrite as Rewrite
from ._models import SkillContent as SkillContent
from ._models import ToolCall as ToolCall
from ._models import ToolDef as ToolDef
from ._models import ToolResult as ToolResult
from ._models import Veto as Veto
from ._nexus import Nexus as Nexus
from ._registry import ToolRegistrationError as ToolRegistrationError
from ._results import failure as failure
from ._results import normalize_result as normalize_result
from ._results import success as success
from ._tool import native_tool as native_tool
from ._tool import sanitize as sanitize
from ._tool import tool as tool
from ._toolkit import execute as execute
from ._toolkit import toolkit as toolkit

__version__: str
__all__: list[str]
