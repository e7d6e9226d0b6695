"""The run_code engine of one Nexus (runs in the host): its settings, the tool and its
description, the bindings cache, the launcher, and the flow of a run.

A run, top to bottom (`CodeExec.execute`), each step in one place:

    request   the call's script and id, and its session folder          _request
    check     the AST check (check.py) and the layers `require` names    _check
    launch    a child from the launcher (launchers/)                     _run: Seat.take
    serve     START, then the script's calls and output (runner.py)      _run: ScriptRun.run
    finish    the child ended, how the run ended (runner.py)             _run: ScriptRun.run
    persist   the session folder (session.py), the result event          _persist

The latency tricks (fastpath.py, launchers/zygote.py) stay behind names: the spare child a run
takes (a `Seat`), and what the host does while the child starts the script (`_announce`: the
request event and the session folder).
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib
import json
import logging
import os
import re
import statistics
import threading
import time
import types
from collections.abc import Container
from pathlib import Path
from typing import Any

import attrs

from nexus_core import CallContext, CancelToken, Nexus, ToolCall, ToolDef, ToolResult

from .. import DEFAULT_ALLOWED_PACKAGES, protocol, sandbox
from .events import CodeExecChunk, CodeExecRequest, CodeExecResult
from ..launchers.base import LayersMissing, Launcher
from ..launchers.machine import MachineLauncher
from ..launchers.pool import PROCESS_POOL, PooledLauncher
from ..launchers.spawn import SpawnLauncher
from ..launchers.zygote import ZygoteLauncher
from .bindings import (
    MAX_DEPTH,
    MAX_LITERALS,
    MAX_PROPERTIES,
    MAX_STUB_BYTES,
    MAX_UNION,
    Bindings,
    BindingsCache,
    ToolPiece,
    left_out_note,
    script_description,
    visible,
)
from .check import ScriptRejected, check_and_compile, skill_module_name, unfence
from .fastpath import Seat
from .runner import (
    CALLS_IN_FLIGHT_PER_WORKER,
    STOP_GRACE,
    MAX_CALLS_PAST_LIMIT,
    MAX_PENDING_CALL_BYTES,
    OUTPUT_SLACK_BYTES,
    Outcome,
    ScriptRun,
    Settings,
)
from .journal import JOURNAL_FILE, FolderJournal, Journal, JournalBusy, MemoryJournal, in_use
from .settings import CodeExecSettings
from .session import SessionFiles, SessionStore, folder_for
from .skill_helpers import MAX_HELPER_BYTES, MAX_HELPER_FILES, MAX_HELPERS_BYTES, read_helpers
from .streaming import RECORD_BUDGET

log = logging.getLogger("nexus_tool_code_exec")

#: how long closing waits for the runs it leaves to the next host to end here (`leave_runs`)
LEAVE_WAIT_SECONDS = 10.0

TOOL_NAME = "run_code"

INPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "script": {
            "type": "string",
            "description": "A complete Python script that defines `def run(ctx):`; its return value "
                           "(JSON-serializable) is the result.",
        }
    },
    "required": ["script"],
    "additionalProperties": False,
}

OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "stdout": {"type": "string", "description": "what the script printed (stdout and stderr)"},
        "result": {"description": "run's return value"},
        "stdout_truncated": {"type": "boolean"},
    },
}

#: the companion tool: the exact stubs of the tools that match, when the description lists groups
API_TOOL = "run_code_api"

API_INPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string",
                  "description": "Words to look for in the tools' names, groups and descriptions."},
        "names": {"type": "array", "items": {"type": "string"},
                  "description": "Tool names, or group names as run_code's description lists them."},
        "limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 12,
                  "description": "The most tools to return."},
        "stubs": {"type": "boolean", "default": False,
                  "description": "A group's tools as full stubs, not one line each."},
    },
    "additionalProperties": False,
}

API_DESCRIPTION = (
    "The Python functions a run_code script can call, for the tools that match: give `query` (words "
    "to search for) or `names` (tools, or groups as run_code's description lists them). Returns each "
    "tool's exact stub (signature, docstring, result classes), a group's tools one line each unless "
    "`stubs`, first a line saying how many matched and how many are shown."
)

#: how many tools an answer shows unless `limit` says otherwise
API_QUERY_LIMIT = 12
#: words in a tool's name that make it a likely first call of its group (a group line names those first)
ENTRY_WORDS = frozenset({"search", "find", "list", "get", "query", "lookup", "read", "fetch", "describe"})
#: what run_code_api answers for the runtime's own names (they are no tool, but every stub uses them)
RUNTIME_STUB = """class ToolError(Exception):  # a call that did not succeed
    tool: str  # the tool's name
    reason: str  # why, as the host said it
class ToolVetoed(ToolError): ...  # a gate refused the call
class ToolFailed(ToolError): ...  # the tool ran (or could not) and reported an error
class Result:  # what a tool without an output schema returns
    output: str
    output_file: str | None  # the path of a file it returned"""
#: how many tools a big group's line names (its first by `CodeExec.rank`)
GROUP_EXAMPLES = 6
#: the most characters the group lines of run_code's description take
GROUP_LINES_BUDGET = 2400

INTRO = """Run a Python script that calls the tools below as Python functions: many calls in one step, in a sandbox.

The script defines `def run(ctx):`. You get what it printed, a `--- result ---` line and run's return value (a string as it is, else JSON), or just one of them; at most {text} bytes (UTF-8), the middle of more dropped.
- `import tools`: a tool takes as keywords the arguments its own declaration describes (where you have one; a class-typed one may be a dict) and returns the class in its stub, not a direct call's text: `r = tools.{example_tool}`, then `r.{example_field}`.
- A veto raises `tools.ToolVetoed`, any other error (what a direct call returns as one) `tools.ToolFailed`, both `tools.ToolError` with `.tool` and `.reason` (str). A tool without an output schema returns `tools.Result`: `.output` (str), `.output_file` (str | None: a file it returned), `.error` (always None: errors raise).
- `import parallel`: `parallel.map(items, fn)` is `[fn(x) for x in items]`, `parallel.all(f, g)` is `[f(), g()]`, with at most {max_workers} of the calls running at once, however many items; results in order, the first error raised.
- Other imports: {allowed}.{skills} Refused: other imports, threads, processes, sockets (tools run on the host{webfetch}), `__dunder__` attributes (tell errors apart by class, `e.tool`, `e.reason`).
- `ctx.call_id` is this call's id, `ctx.remaining()` the seconds left. open() sees an empty scratch folder of this run: reach the workspace's files with the tools.
- Limits: {timeout}s, {calls} tool calls.

Example:
{example}
"""

EXAMPLE_FILES = """    import tools, parallel

    def run(ctx):
        paths = tools.glob(pattern="**/*.md").paths
        texts = parallel.map(paths, lambda p: tools.read(path=p).content)
        return {"files": len(paths), "lines": sum(len(t.splitlines()) for t in texts)}
"""

EXAMPLE_ANY = """    import tools, parallel

    def run(ctx):
        results = parallel.map(["a", "b", "c"], lambda x: tools.{name}({arg}=x))
        return [str(r) for r in results]
"""

GROUPS_NOTE = """# {count} tools, too many to list here; their groups follow. Before writing the script, call the
# {api} tool with query="what you need" or names=[tools, or a group for its tools one line each] for the exact functions and result classes.
"""


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and not n % (1 << 20) else (f"{n >> 10} KiB" if not n % 1024 else f"{n} bytes")


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[^0-9a-z]+", text.lower()) if w]


@functools.lru_cache(maxsize=8192)
def _entry_rank(name: str) -> int:
    """0 for a name that reads like a group's first call (`crm_search`), else 1 (cached: the
    groups are ranked again at each registration)."""
    return 0 if ENTRY_WORDS.intersection(_words(name)) else 1


def cut_middle(text: str, limit: int) -> str:
    """`text` within `limit` bytes (UTF-8): its head and its tail, and between them a line saying
    how many bytes were dropped."""
    # (a lone surrogate, which a script can return and a tool can print, is kept as it is)
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    keep = max(limit - 64, 2)
    head = data[: keep - keep // 2].decode("utf-8", "ignore")
    tail = data[len(data) - keep // 2:].decode("utf-8", "ignore")
    dropped = len(data) - len(head.encode("utf-8", "surrogatepass")) - len(tail.encode("utf-8", "surrogatepass"))
    return (head + ("" if head.endswith("\n") else "\n") + f"[... {dropped} bytes dropped ...]\n" + tail)


def result_text(outcome: Outcome, limit: int = 1 << 62) -> str:
    """What a model reads of a successful run, within `limit` bytes (`max_text_bytes`): what the
    script printed, as plain text, then run's return value (a string as it is, anything else as
    JSON), after `--- result ---`."""
    return cut_middle(_result_text(outcome), limit)


def _result_text(outcome: Outcome) -> str:
    stdout = outcome.stdout
    if outcome.result is None:
        return stdout if stdout else "(the script printed nothing and returned None)"
    value = outcome.result
    shown = value if isinstance(value, str) else (outcome.result_json if outcome.result_json is not None
                                                  else json.dumps(value, ensure_ascii=False))
    if not isinstance(value, str) and outcome.result_json is not None and "\\u" in shown:
        shown = json.dumps(value, ensure_ascii=False)  # the child's JSON escapes non-ASCII text
    if not stdout:
        return shown
    return stdout + ("" if stdout.endswith("\n") else "\n") + "--- result ---\n" + shown


@attrs.define
class _Run:
    """One call of run_code on its way through `execute`."""

    call_id: str
    script: str
    record: bool  # persist it and fire the code.exec events (not for `nexus doctor`'s runs)
    folder: Path | None  # its session folder, where scripts are persisted
    skills: dict[str, list[tuple[str, str]]] = attrs.field(factory=dict)  # the active skills' helpers
    tree: ast.Module | None = None  # the script, as its check parsed it
    code: types.CodeType | None = None  # the script, as its check compiled it
    files: SessionFiles | None = None  # its session folder's files, open while it runs
    announced: bool = False  # the request event fired


class CodeExec:
    """run_code for one Nexus: made by that Nexus's `CodeExecPlugin`, whose hooks keep it
    current with that Nexus's tools and skills."""

    def __init__(self, nexus: Nexus, config: CodeExecSettings, plugin_id: str) -> None:
        self.nexus = nexus
        self.config = config
        self.plugin_id = plugin_id
        self.settings = Settings(
            timeout_seconds=float(config.timeout_seconds),
            max_output_bytes=config.max_output_bytes,
            max_workers=config.max_workers,
            max_tool_calls=config.max_tool_calls,
            max_result_bytes=config.max_result_bytes,
            cpu_seconds=float(config.cpu_limit),
            max_child_messages=config.max_child_messages,
            max_child_bytes=config.max_child_bytes,
            suspend_after_seconds=(None if config.suspend_after_seconds is None
                                   else float(config.suspend_after_seconds)),
        )
        self.journaling = config.journal
        #: run_code call ids being resumed from their journal (`resume`), until their run starts
        self._resuming: set[str] = set()
        self.max_listed_tools = config.max_listed_tools
        self.max_listed_bytes = config.max_listed_bytes
        self.max_text_bytes = config.max_text_bytes
        self.sessions = SessionStore()
        self._lock = threading.Lock()
        self._pieces = BindingsCache()
        self._bindings: tuple[Any, Bindings] | None = None
        self._launcher: Launcher | None = None
        self.launcher_note = "not started yet"
        self._closed = False
        self._missing: tuple[str, list[str]] | None = None
        #: the runs being served, by run_code call id (to stop a run's clock while a person decides)
        self._serving: dict[str, ScriptRun] = {}
        #: the plugin's `register` (from nexus_register_tools), for the companion tool
        self._register: Any = None
        self._description: str | None = None
        #: the skill helper modules the description names (read again when skills change)
        self._skill_modules: list[str] | None = None

    # -- the tool ---------------------------------------------------------------------------

    def tooldefs(self, register: Any) -> None:
        """Register run_code (and, when the description lists groups, its companion tool)."""
        self._register = register
        register(self.tooldef())
        self._sync_api_tool()

    def tooldef(self, description: str | None = None) -> ToolDef:
        self._description = description if description is not None else self.description()
        return ToolDef(
            name=TOOL_NAME,
            handler=self.handle,
            description=self._description,
            input_schema=INPUT_SCHEMA,
            output_schema=OUTPUT_SCHEMA,
            takes_context=True,
            exposure="direct",  # a script cannot call run_code
        )

    def api_tooldef(self) -> ToolDef:
        return ToolDef(name=API_TOOL, handler=self.api, description=API_DESCRIPTION,
                       input_schema=API_INPUT_SCHEMA, exposure="direct")

    def bound_tools(self) -> list[ToolDef]:
        """The tools a script can call: every tool but run_code, its companion and the tools
        whose `exposure` is "direct"."""
        return [t for t in self.nexus.tools() if t.name not in (TOOL_NAME, API_TOOL) and t.exposure != "direct"]

    def lists_groups(self, count: int | None = None) -> bool:
        """Whether the description names groups instead of listing every tool's stub: past
        `max_listed_tools` tools, or past `max_listed_bytes` of stubs (a few tools whose schemas
        are huge, each stub within its own cap)."""
        if count is None:
            count = len(self.bound_tools())
        if count > self.max_listed_tools:
            return True
        return len(self.listing().encode("utf-8", "surrogatepass")) > self.max_listed_bytes

    def listing(self) -> str:
        """The stubs the description lists: in brief for the tools the model has declarations of."""
        return self.bindings().listing([t.name for t in self.nexus.model_tools()])

    def description(self, bound: list[ToolDef] | None = None) -> str:
        if self._skill_modules is None:
            self._skill_modules = sorted(self.skill_helpers())
        skills = self._skill_modules
        skill_text = ""
        if skills:
            skill_text = " Skill helpers: " + ", ".join(f"skills.{n}" for n in skills) + "."
        if bound is None:
            bound = self.bound_tools()
        names = {t.name for t in bound}
        if {"glob", "read"} <= names:
            example = EXAMPLE_FILES
            example_tool, example_field = 'read(path="notes.md")', "content"
        else:
            first = next((t for t in bound if (t.input_schema or {}).get("properties")), None)
            tool_name = first.name if first is not None else "NAME"
            arg = next(iter((first.input_schema or {}).get("properties") or {"arg": 0})) if first else "arg"
            example = EXAMPLE_ANY.format(name=tool_name, arg=arg)
            example_tool, example_field = f'{tool_name}({arg}="...")', "output"
        intro = INTRO.format(
            example_tool=example_tool,
            example_field=example_field,
            max_workers=self.settings.max_workers,
            allowed=" ".join(self.config.allowed_packages),
            skills=skill_text,
            # "no network" is no reason to leave webfetch out of a script
            webfetch=", webfetch too" if "webfetch" in names else "",
            timeout=f"{self.settings.timeout_seconds:g}",
            text=min(self.max_text_bytes, self.settings.max_output_bytes + self.settings.max_result_bytes),
            calls=self.settings.max_tool_calls,
            example=example,
        )
        if self.lists_groups(len(bound)):
            # from the pieces alone, not the whole bindings: past max_listed_tools every
            # registration would otherwise put all the pieces together again
            pieces = [(tool, self._pieces.piece(tool)) for tool in bound]
            made = [tool for tool, piece in pieces if isinstance(piece, ToolPiece)]
            note = left_out_note(tool.name for tool, piece in pieces if not isinstance(piece, ToolPiece))
            return intro + "\n" + self.groups_text(made, note)
        return intro + "\n" + self.listing()

    # -- groups and the companion tool ------------------------------------------------------

    @staticmethod
    def group_of(tool: ToolDef) -> str:
        """The group a tool is listed in: its MCP server, else the plugin that gave it."""
        server = tool.annotations.get("mcp_server") if isinstance(tool.annotations, dict) else None
        if isinstance(server, str) and server:
            return f"MCP server {server}"
        return tool.plugin or "the host's own tools"

    @staticmethod
    def rank(tool: ToolDef) -> tuple[int, int, int, str]:
        """Where a tool comes in its group's line: the ones its plugin marks first (annotation
        `featured: true`), then the likely first calls (a name with `search`, `find`, `list`,
        `get`...), then the shorter names (the general tools: `crm_search` before
        `crm_archive_address`), then by name."""
        annotations = tool.annotations if isinstance(tool.annotations, dict) else {}
        return (0 if annotations.get("featured") is True else 1, _entry_rank(tool.name), len(tool.name), tool.name)

    def groups(self, bound: list[ToolDef] | None = None, aliases: Container[str] | None = None) -> dict[str, list[str]]:
        """{group: [tool name or alias, ...]}, the largest groups first, each group's tools in
        `rank` order; a tool's aliases with it (those in `aliases`, where given: the ones the
        bindings have)."""
        out: dict[str, list[ToolDef]] = {}
        for tool in bound if bound is not None else self.bound_tools():
            out.setdefault(self.group_of(tool), []).append(tool)
        ordered = {}
        for group, tools in sorted(out.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            names: list[str] = []
            for tool in sorted(tools, key=self.rank):
                names.append(tool.name)
                names += [a for a in getattr(tool, "aliases", ()) if aliases is None or a in aliases]
            ordered[group] = names
        return ordered

    def groups_text(self, bound: list[ToolDef], note: str = "") -> str:
        """One line per group, with how many tools it has (and their names, while they fit)."""
        lines = [GROUPS_NOTE.format(count=len(bound), api=API_TOOL), note]
        groups = self.groups(bound)
        used = 0
        for i, (group, names) in enumerate(groups.items()):
            shown = ", ".join(names) if len(names) <= 8 else "e.g. " + ", ".join(names[:GROUP_EXAMPLES]) + ", ..."
            line = visible(f"# - {group}: {len(names)} tool{'s' if len(names) != 1 else ''} ({shown})") + "\n"
            if used + len(line) > GROUP_LINES_BUDGET:
                rest = len(groups) - i
                lines.append(f"# - and {rest} more group{'s' if rest != 1 else ''}: {API_TOOL} names them\n")
                break
            lines.append(line)
            used += len(line)
        return "".join(lines)

    def api(self, arguments: dict[str, Any]) -> str:
        """run_code_api: the exact stubs of the tools that match `query` or `names` (a group's
        tools one line each unless `stubs`), at most `limit` of them, after a line saying how
        many matched."""
        query = arguments.get("query") or ""
        wanted = arguments.get("names") or []
        limit = int(arguments.get("limit") or API_QUERY_LIMIT)
        full = bool(arguments.get("stubs"))
        bindings = self.bindings()
        bound = [bindings.by_tool[name][1].tool for name in bindings.by_tool]
        groups = self.groups(bound, bindings.aliases)
        chosen: list[str] = []
        listed: set[str] = set()  # the tools named by their group: one line each unless `stubs`
        notes: list[str] = []
        runtime = False
        by_function = {fname: piece.tool.name for fname, piece in bindings.pieces}
        for name in wanted:
            if name in bindings.by_tool or name in bindings.aliases:
                chosen.append(name)
            elif name in by_function:
                chosen.append(by_function[name])
            elif name in groups:
                chosen += groups[name]
                listed.update(groups[name])
            elif name in ("Result", "ToolError", "ToolVetoed", "ToolFailed"):
                runtime = True
            else:
                close = difflib.get_close_matches(name, [*bindings.by_tool, *groups], n=1)
                notes.append(f"# no tool or group {name!r}" + (f"; did you mean {close[0]!r}?" if close else ""))
        if query:
            words = _words(query)
            scored = []
            for tool in bound:
                name_words = set(_words(tool.name))
                group_words = set(_words(self.group_of(tool)))
                text_words = set(_words(tool.description))
                score = sum(3 * (w in name_words or w in tool.name.lower()) + 2 * (w in group_words)
                            + (w in text_words) for w in words)
                if score:
                    scored.append((-score, tool.name))
            found = [name for _, name in sorted(scored)]
            if not found:
                notes.append(f"# no tool matches {query!r}; the groups: " + ", ".join(groups))
            chosen += found
        if not wanted and not query:
            notes.append("# give query= or names=; the groups: " + "; ".join(
                f"{g} ({len(n)} tools)" for g, n in groups.items()))
        unique = list(dict.fromkeys(chosen))
        shown = unique[:limit]
        if (query or listed) and (len(unique) > 1 or len(shown) < len(unique)):
            more = "" if len(shown) == len(unique) else "; give limit= (or a narrower query) for more"
            notes.insert(0, f"# {len(unique)} tools matched, {len(shown)} shown{more}")
        parts = [self._api_line(bindings, name) if name in listed and not full else bindings.stub_of(name)
                 for name in shown]
        # the one-line entries together, the stubs apart
        text = ""
        for i, part in enumerate(parts):
            if i:
                text += "\n" if "\n" not in part and "\n" not in parts[i - 1] else "\n\n\n"
            text += part
        if runtime:
            text = RUNTIME_STUB + ("\n\n\n" + text if text else "")
        return "\n".join(notes) + ("\n\n" if notes and text else "") + text

    @staticmethod
    def _api_line(bindings: Bindings, name: str) -> str:
        """A tool in one line: its function's name and the first sentence of its docstring."""
        if name in bindings.aliases:
            return bindings.stub_of(name)
        fname, piece = bindings.by_tool[name]
        text = " ".join(script_description(piece.tool).split())
        sentence = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0]
        return visible(f"# {fname}: " + (sentence if len(sentence) <= 160 else sentence[:157] + "..."))

    def _sync_api_tool(self, count: int | None = None) -> None:
        """Offer the companion tool exactly while the description lists groups."""
        if self._register is None or self._closed:
            return
        present = self.nexus.tool(API_TOOL)
        wanted = self.lists_groups(count)
        if wanted and present is None:
            try:
                self._register(self.api_tooldef())
            except Exception:  # a tool of that name from someone else: the groups still show
                log.exception("run_code: could not register %s", API_TOOL)
        elif not wanted and present is not None and present.plugin == self.plugin_id:
            self.nexus.remove_tool(API_TOOL)

    def _refresh_description(self) -> None:
        current = self.nexus.tool(TOOL_NAME)
        if current is None or current.plugin != self.plugin_id or self._closed:
            return
        bound = self.bound_tools()
        description = self.description(bound)
        if description != self._description:
            self.nexus.replace_tool(self.tooldef(description), plugin=self.plugin_id)
        self._sync_api_tool(len(bound))

    # -- bindings and skills ----------------------------------------------------------------

    def skill_helpers(self) -> dict[str, list[tuple[str, str]]]:
        """`{module name: [(file name, source), ...]}` for the active skills' .py files."""
        try:
            from nexus_core.skills import active_skills
        except ImportError:
            return {}
        skills = active_skills(self.nexus)
        return read_helpers(skills, {skill.name: skill_module_name(skill.name) for skill in skills})

    def bindings(self) -> Bindings:
        key = self.nexus.tools_version
        with self._lock:
            cached = self._bindings
        if cached is not None and cached[0] == key:
            return cached[1]
        made = self._pieces.assemble(self.bound_tools())
        with self._lock:
            self._bindings = (key, made)
        return made

    def tools_changed(self, tool: ToolDef, gone: bool = False) -> None:
        """A tool came or went (the plugin's nexus_tool_register / nexus_tool_unregister):
        its piece of the bindings is made (or forgotten) now, and the description follows."""
        if tool.name in (TOOL_NAME, API_TOOL):
            return
        if gone:
            self._pieces.forget(tool.name)
        elif tool.exposure != "direct":
            self._pieces.piece(tool)
        self._refresh_description()

    def skills_changed(self) -> None:
        """A skill was activated or deactivated: the description lists the skills' helpers."""
        self._skill_modules = None
        self._refresh_description()

    # -- a run, top to bottom ------------------------------------------------------------------

    def handle(self, arguments: dict[str, Any], ctx: CallContext) -> ToolResult:
        with self._lock:
            resume = ctx.call_id in self._resuming
            self._resuming.discard(ctx.call_id)
        return self._result(self.execute(arguments["script"], ctx.call_id, cancel=ctx.cancel, resume=resume))

    def execute(self, script: str, call_id: str, *, record: bool = True,
                cancel: CancelToken | None = None, resume: bool = False,
                journal: Journal | None = None) -> Outcome:
        """Check and run one script. With `record` (the tool's own calls), persist it and fire
        the code.exec events; without (`nexus doctor`'s timing runs), do neither. `cancel`
        (run_code's own call's token: Ctrl-C in the agent) stops the run from any thread: its
        process is killed, its inner calls cancelled, and it ends as `cancelled: ...`.

        Each inner call is journaled as it completes (`journal` in the config); with `resume`,
        the calls an earlier attempt of `call_id` journaled are answered from its journal (see
        `resume`). `journal` gives the run a journal of the caller's (replay's)."""
        # a script sent inside markdown fences runs as the code inside them
        run = self._request(unfence(script), call_id, record)
        outcome = self._check(run)
        if outcome is None and cancel is not None and cancel.cancelled:
            outcome = Outcome(error=f"cancelled: run_code was stopped by its caller before its script ran "
                                    f"({cancel.reason or 'its caller stopped it'})", cancelled=True)
        if journal is None:
            try:
                journal = self._journal_for(run, resume)
            except (JournalBusy, OSError) as exc:  # a resume that cannot read its journal must not run
                outcome = Outcome(error=f"runtime error: cannot resume run_code call {call_id!r}: {exc}")
                if isinstance(exc, JournalBusy):
                    # another host resumed it first (two long-lived hosts recovering at once): its
                    # record is that host's to write, not overwritten with this refusal
                    return outcome
        try:
            if outcome is None:
                outcome = self._run(run, cancel, journal, resumed=resume and bool(journal and journal.entries()))
            if outcome.left:  # its host closed while it went on: left to the next host, as by a kill
                return outcome
            return self._persist(run, outcome)
        finally:
            if journal is not None:
                # the run ended (its record is complete), or was left to be resumed (the journal stays)
                journal.close(keep=outcome is not None and outcome.left)

    def _journal_for(self, run: _Run, resume: bool) -> Journal | None:
        """The run's journal: journal.jsonl in its session folder (what survives its host), in
        memory without one (a suspension in this process still resumes from it)."""
        if not self.journaling or not run.record:
            return None
        if run.folder is not None:
            return FolderJournal(run.folder, resume)  # opened at its first call, unless resumed
        return MemoryJournal()

    # -- resuming a run whose host stopped --------------------------------------------------

    def interrupted_runs(self) -> list[str]:
        """The run_code calls of this session folder whose host stopped before they ended (a
        journal is left, and no live process holds it), oldest first: what `resume` can finish."""
        parent = folder_for(self.nexus.config.session_dir, self.plugin_id, "_").parent
        try:
            folders = [p for p in parent.iterdir() if (p / JOURNAL_FILE).is_file() and not in_use(p / JOURNAL_FILE)]
        except OSError:
            return []
        return [p.name for p in sorted(folders, key=lambda p: (p / JOURNAL_FILE).stat().st_mtime)]

    def resume(self, call_id: str, **invoke: Any) -> ToolResult:
        """Run the run_code call `call_id` again from its session folder (its script.py), as the
        same call, through `Nexus.invoke` (run_code's gates and observers see it; `invoke` gives
        an approver, a cancel token), with every inner call its journal holds answered from it:
        no completed call runs again; one that was running when the host stopped is answered as
        possibly done. Raises LookupError when the call left nothing to resume."""
        folder = folder_for(self.nexus.config.session_dir, self.plugin_id, call_id)
        if not (folder / JOURNAL_FILE).is_file():
            raise LookupError(f"run_code call {call_id!r} has no journal in {folder}: it ended (its record is "
                              "complete) or never made a call; nothing to resume")
        if in_use(folder / JOURNAL_FILE):
            raise LookupError(f"run_code call {call_id!r} is going on in another process (it holds {folder / JOURNAL_FILE})")
        try:
            script = (folder / "script.py").read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise LookupError(f"run_code call {call_id!r}: cannot read its script in {folder}: {exc}") from None
        with self._lock:
            self._resuming.add(call_id)
        try:
            return self.nexus.invoke(ToolCall(id=call_id, name=TOOL_NAME, arguments={"script": script},
                                              metadata={"resumed": True}), **invoke)
        finally:
            with self._lock:
                self._resuming.discard(call_id)


    def _request(self, script: str, call_id: str, record: bool) -> _Run:
        folder = None
        if record and self.config.persist_scripts:
            folder = folder_for(self.nexus.config.session_dir, self.plugin_id, call_id)
        return _Run(call_id, script, record, folder)

    def _check(self, run: _Run) -> Outcome | None:
        """The script's check, and the sandbox's: None if it may run, else why not."""
        run.skills = self.skill_helpers()
        try:
            run.tree, run.code = check_and_compile(
                run.script, self.config.allowed_packages, active_skills=run.skills,
                reject_threads=self.config.reject_threads, api=self.bindings())
        except ScriptRejected as exc:
            return Outcome(error=str(exc))
        missing = self.missing_required()
        if missing:
            return Outcome(error="sandbox unavailable: run_code requires " + "; ".join(missing))
        return None

    def _run(self, run: _Run, cancel: CancelToken | None = None, journal: Journal | None = None,
             resumed: bool = False) -> Outcome:
        """Launch the script's process and serve it to its end."""
        bindings = self.bindings()
        launcher = self.launcher()
        start = self._start_message(run, bindings, launcher)
        try:
            seat = Seat.take(launcher)
        except LayersMissing as exc:  # where the scripts run (a Ray node) lacks a layer `require` names
            self._announce(run)
            return Outcome(error=f"sandbox unavailable: {exc}")
        except Exception as exc:
            self._announce(run)  # announced all the same
            return Outcome(error=f"runtime error: could not start the script's process: {exc}")
        served = ScriptRun(self.nexus, run.call_id, self.settings, bindings.callable_names,
                           emit_chunk=self._emit_chunk if run.record else (lambda chunk: None),
                           journal=journal, resumed=resumed)
        self._serving[run.call_id] = served
        forget = cancel.on_cancel(lambda: served.stop(cancel.reason)) if cancel is not None else None
        try:
            return served.run(launcher, seat, start, meanwhile=lambda: self._announce(run))
        finally:
            if forget is not None:
                forget()
            self._serving.pop(run.call_id, None)

    def leave_runs(self, timeout: float = LEAVE_WAIT_SECONDS) -> list[str]:
        """This Nexus closes (cleanly: `nx.close()`, `nexus chat`'s exit, `nexus mcp serve`'s
        SIGTERM) while runs go on: each run that journals to its session folder is left to the
        next host, as a kill of this one would leave it: its child is ended, its journal kept
        (closed: nothing more is written to it, its lock let go), no result recorded; its inner
        calls are not cancelled, so an approval one of them waits on stays pending, neither
        refused nor answered (the durable backend ends the wait in this process as it closes).
        Waits up to `timeout` for those runs to end here; returns their call ids. Runs without
        such a journal are left alone (the launcher's close ends them as before)."""
        with self._lock:
            leaving = {call_id: served for call_id, served in list(self._serving.items())
                       if isinstance(served.journal, FolderJournal) and served.journal.resumable}
        for served in leaving.values():
            served.leave()
        deadline = time.monotonic() + timeout
        while any(self._serving.get(call_id) is served for call_id, served in leaving.items()):
            if time.monotonic() >= deadline:
                log.warning("run_code: closing while runs it left still end: %s", ", ".join(sorted(leaving)))
                break
            time.sleep(0.02)
        if leaving:
            log.info("run_code: its host closes; left to the next host (journal kept): %s", ", ".join(sorted(leaving)))
        return sorted(leaving)

    def pause_clock(self, call_id: str | None, call: ToolCall | None = None) -> None:
        """Stop the clock of run `call_id` (a run_code call id): one of its inner calls (`call`)
        waits for a person, which its journal notes. Nestable; every pause is undone by one
        `resume_clock`. Other ids are ignored."""
        served = self._serving.get(call_id or "")
        if served is not None:
            served.pause()
            if call is not None:
                served.asking(call, True)

    def resume_clock(self, call_id: str | None, call: ToolCall | None = None) -> None:
        served = self._serving.get(call_id or "")
        if served is not None:
            if call is not None:
                served.asking(call, False)
            served.resume()

    def _start_message(self, run: _Run, bindings: Bindings, launcher: Launcher) -> protocol.StartMessage:
        """The START: the script (and its code, compiled here), the bindings (which the
        launcher's next children get compiled), the limits."""
        key = f"{id(self)}:{self.nexus.tools_version}"
        launcher.preload(key, bindings.payload)
        start: protocol.StartMessage = {
            "t": protocol.START,
            "call_id": run.call_id,
            "script": run.script,
            "bindings": bindings.payload,
            "bindings_key": key,
            "skills": run.skills,
            "max_workers": self.settings.max_workers,
            "max_output_bytes": self.settings.max_output_bytes,
            "max_result_bytes": self.settings.max_result_bytes,
            "timeout": self.settings.timeout_seconds,
            # the child lowers its limits to these (a shared pool's child has the pool's ceilings)
            "limits": {"memory_mb": self.config.memory_mb, "cpu_seconds": self.config.cpu_limit},
        }
        # compiled here (by the check, from the tree it parsed): the child only loads it (a
        # fresh child compiles several times slower than this warm process, see
        # child.runtime.load_code)
        assert run.code is not None
        start["code"] = protocol.pack_code(run.code)
        return start

    def _announce(self, run: _Run) -> None:
        """While the child starts the script: the request event, and the run's session folder
        (the end of the run then only writes into the folder's open files)."""
        if not run.record:
            return
        run.announced = True
        self.nexus.notify("nexus_code_exec_request", request=CodeExecRequest(
            call_id=run.call_id, script=run.script, session_dir=str(run.folder) if run.folder else None))
        if run.folder is not None:
            run.files = self.sessions.open(run.folder, run.script)

    def _persist(self, run: _Run, outcome: Outcome) -> Outcome:
        """The run's session folder, and the result event for a run that was announced."""
        if run.record:
            if run.folder is not None:
                # a record that cannot be written is an error of the run (persist logs it too)
                outcome.record_error = self.sessions.persist(run.folder, run.files, run.script, outcome)
            if run.announced:
                self.nexus.notify("nexus_code_exec_result", result=CodeExecResult(
                    call_id=run.call_id, stdout=outcome.stdout, result=outcome.result, error=self._error_of(outcome),
                    stdout_truncated=outcome.stdout_truncated, duration_seconds=outcome.duration,
                    tool_calls=len(outcome.call_lines),
                ))
        return outcome

    def _emit_chunk(self, chunk: CodeExecChunk) -> None:
        self.nexus.notify("nexus_code_exec_stdout", chunk=chunk)  # each observer contained

    @staticmethod
    def _error_of(outcome: Outcome) -> str | None:
        """The run's error, and that its record could not be written: `record failed: ...` for a
        run that otherwise succeeded (its result stays in output_structured)."""
        if outcome.record_error is None:
            return outcome.error
        if outcome.error is None:
            return f"record failed: {outcome.record_error}"
        return f"{outcome.error}\n(and record failed: {outcome.record_error})"

    def _result(self, outcome: Outcome) -> ToolResult:
        """The tool's result: `output_structured` is `{"stdout", "result", "stdout_truncated"}`
        (empty keys left out) for programs; `output` is the text a model reads (`result_text`)."""
        body: dict[str, Any] = {}
        if outcome.stdout:
            body["stdout"] = outcome.stdout
        if outcome.error is None and outcome.result is not None:
            body["result"] = outcome.result
        if outcome.stdout_truncated:
            body["stdout_truncated"] = True
        error = self._error_of(outcome)
        if error is not None:
            where = f" ({outcome.where})" if outcome.where else ""
            text = error + where + (f"\n--- stdout ---\n{outcome.stdout}" if outcome.stdout else "")
            return ToolResult(id="", name=TOOL_NAME, output=cut_middle(text, self.max_text_bytes),
                              error=error, output_structured=body or None, metadata=self._resumed_facts(outcome),
                              error_kind="cancelled" if outcome.cancelled else "failure")
        text = result_text(outcome, self.max_text_bytes)
        if outcome.stopped_calls:  # a script that ended without waiting for its calls (it forged them)
            text = cut_middle(f"{text}\n({outcome.stopped_text})", self.max_text_bytes)
        return ToolResult(id="", name=TOOL_NAME, output=text, output_structured=body, metadata=self._resumed_facts(outcome))

    @staticmethod
    def _resumed_facts(outcome: Outcome) -> dict[str, Any]:
        """What the result says of a resumed run (in its `metadata`): that it was resumed, how
        many inner calls its journal answered, how often it was suspended."""
        if not outcome.resumed:
            return {}
        return {"resumed": True, "journal_calls": outcome.journal_calls, "suspensions": outcome.suspensions}

    # -- the launcher and the sandbox ---------------------------------------------------------

    def launcher(self) -> Launcher:
        """The zygote launcher, started on first use; a fresh-interpreter launcher where a
        zygote cannot run (the reason is kept for `nexus doctor`)."""
        with self._lock:
            if self._launcher is None:
                self._launcher, self.launcher_note = self._start_launcher()
            return self._launcher

    def _start_launcher(self) -> tuple[Launcher, str]:
        mode = self.config.launcher
        policy = self.policy()
        if mode == "spawn":
            return SpawnLauncher(policy), "fresh interpreter per script (launcher: spawn in config)"
        if mode == "ray":
            return self._ray_launcher()
        if self.config.pool == "machine":
            machine = MachineLauncher(policy, DEFAULT_ALLOWED_PACKAGES, idle=self.config.pool_idle_seconds)
            try:
                machine.start()
            except Exception as exc:
                if mode == "zygote":
                    raise
                return SpawnLauncher(policy), f"fresh interpreter per script: the machine's pool is unreachable ({exc})"
            return machine, f"the machine's pool server at {machine.socket_path} forks each script (pool: machine)"
        zygote: ZygoteLauncher
        if self.config.pool == "process":
            zygote = PooledLauncher(PROCESS_POOL, policy, DEFAULT_ALLOWED_PACKAGES)
            note = "warm zygote shared by every Nexus of this process forks each script (pool: process)"
        else:
            zygote = ZygoteLauncher(self.config.allowed_packages, policy)
            note = "warm zygote of this Nexus alone forks each script (pool: nexus)"
        try:
            zygote.start()
        except Exception as exc:
            zygote.close()
            if mode == "zygote":
                raise
            return SpawnLauncher(policy), f"fresh interpreter per script: the zygote could not start ({exc})"
        return zygote, note

    def _ray_launcher(self) -> tuple[Launcher, str]:
        """launcher: ray: the nexus-rt-ray package's RemoteLauncher (imported here only: the
        package is optional, and code_exec does not depend on Ray)."""
        try:
            remote = importlib.import_module("nexus_ray.launcher")
        except ImportError as exc:
            raise RuntimeError(f"launcher: ray needs the nexus-rt-ray package ({exc})") from None
        launcher: Launcher = remote.RemoteLauncher(address=self.config.address, require=self.config.require,
                                                   preimport=DEFAULT_ALLOWED_PACKAGES)
        launcher.start()
        return launcher, f"the pools of the Ray cluster's nodes fork each script (launcher: ray, {self.config.address})"

    def layer_statuses(self) -> dict[str, sandbox.LayerStatus]:
        """Each sandbox layer, probed once per process: active, or unavailable and why."""
        return sandbox.layer_statuses()

    def active_layers(self) -> list[str]:
        return sorted(name for name, status in self.layer_statuses().items() if status.active)

    def missing_required(self) -> list[str]:
        """The layers `require` names that this machine lacks, each with why; none with
        launcher: ray, whose scripts never run on this machine: the pool actor of the node given
        a run checks `require` against that node's own layers, and refuses the run without one
        (LayersMissing, "sandbox unavailable: node ... lacks required layers: ...")."""
        if self.config.launcher == "ray":
            return []
        # asked on every run: worked out again only when the switch that disables layers changes
        switch = os.environ.get(sandbox.ENV_DISABLE_LAYERS, "")
        cached = self._missing
        if cached is not None and cached[0] == switch:
            return list(cached[1])
        statuses = self.layer_statuses()
        missing = [f"{name} ({statuses[name].detail if name in statuses else 'unknown layer'})"
                   for name in self.config.require if name not in statuses or not statuses[name].active]
        self._missing = (switch, missing)
        return list(missing)

    def policy(self) -> protocol.ChildPolicy:
        """How every child of this engine is isolated (each also gets its own scratch folder)."""
        cpu = self.config.cpu_limit
        return {
            "layers": self.active_layers(),
            "limits": {"memory_mb": self.config.memory_mb, "cpu_seconds": cpu},
            "read_paths": list(sandbox.runtime_read_paths()),
        }

    # -- nexus doctor -------------------------------------------------------------------------

    def trivial_run_ms(self, runs: int = 20, pause: float = 0.02) -> float:
        """The median wall time of `def run(ctx): return 1`, launch to result, in ms, runs
        `pause` seconds apart: each finds a spare child ready, as runs an agent makes do (back
        to back, a run may wait for the spare the last one's end started)."""
        times = []
        for i in range(runs + 1):
            time.sleep(pause)
            began = time.perf_counter()
            outcome = self.execute("def run(ctx):\n    return 1\n", f"doctor-{i}", record=False)
            if outcome.error:
                raise RuntimeError(outcome.error)
            times.append((time.perf_counter() - began) * 1000)
        return statistics.median(times[1:])  # the first one may start the zygote

    def doctor_lines(self) -> list[str]:
        lines = []
        try:
            launcher = self.launcher()
        except Exception as exc:
            lines.append(f"error: no way to start a script's process: {exc}")
            return lines
        pid = launcher.pid  # the zygote's, as of now: it is replaced if it dies
        lines.append(f"launcher: {self.launcher_note}" + (f" (pid {pid})" if pid else ""))
        lines += sandbox.doctor_lines(self.layer_statuses())
        node_lines = getattr(launcher, "doctor_lines", None)  # launcher: ray: each node's layers
        if callable(node_lines):
            try:
                lines += node_lines()
            except Exception as exc:  # noqa: BLE001 - the report goes on
                lines.append(f"error: the Ray nodes did not report: {exc}")
        lines += self.budget_lines()
        lines += self.bindings_lines()
        for missing in self.missing_required():
            lines.append(f"error: required layer {missing} is unavailable, so run_code refuses to run")
        if not self.missing_required():
            try:
                lines.append(f"a trivial run costs {self.trivial_run_ms():.2f} ms (median of 20, a spare child waiting)")
            except Exception as exc:
                lines.append(f"error: a trivial run failed: {exc}")
        return lines

    def budget_lines(self) -> list[str]:
        """`nexus doctor`'s lines on what a script may make the host hold or do, and on records."""
        settings = self.settings
        lines = [
            f"host budget per run: {settings.max_child_messages} messages (max_child_messages) and "
            f"{_size(settings.max_child_bytes)} (max_child_bytes) from the script's process, of every kind; "
            f"{CALLS_IN_FLIGHT_PER_WORKER * settings.max_workers} calls in flight "
            f"({CALLS_IN_FLIGHT_PER_WORKER} x max_workers; past them the child waits), "
            f"{MAX_PENDING_CALL_BYTES >> 20} MiB of pending call messages, {MAX_CALLS_PAST_LIMIT} calls refused "
            f"past max_tool_calls ({settings.max_tool_calls}), output read up to {OUTPUT_SLACK_BYTES >> 20} MiB "
            f"past max_output_bytes; past any but the in-flight bound the run is stopped with an error naming the limit",
            f"run end: when a run ends (result, error, timeout, or its own call cancelled) its inner calls' "
            f"CancelToken is cancelled, queued calls are refused and never start, running ones are waited for up "
            f"to {STOP_GRACE:g}s, and the result says what became of each; a cancelled run_code kills its process",
            f"skill helpers: regular files of the skill's folder only (no symlinks), at most "
            f"{MAX_HELPER_BYTES >> 10} KiB each, {MAX_HELPER_FILES} a skill, {MAX_HELPERS_BYTES >> 20} MiB in all",
        ]
        if self.config.persist_scripts:
            where = Path(self.nexus.config.session_dir) / "plugins" / self.plugin_id
            lines.append(f"records: {where}, folders 0700 and files 0600; calls.jsonl keeps every call's size "
                         f"and SHA-256, its content whole up to {RECORD_BUDGET >> 20} MiB a run; a record that "
                         "cannot be written is the run's error")
        return lines

    def bindings_lines(self) -> list[str]:
        """`nexus doctor`'s lines on the bindings: how a tool's metadata is kept from breaking or
        steering them, and every tool left out of them or bound under another name, with why."""
        bindings = self.bindings()
        where = ("the zygote compiles them and runs none" if self.config.pool == "nexus" else
                 "the shared pool's zygote holds none (each child compiles those its start brings)")
        lines = [
            f"bindings: {len(bindings.pieces)} tools; each tool's piece is generated from its metadata with every "
            "text escaped, checked to be only the classes and the function it should be, and compiled, on its own "
            f"(one that fails leaves out its tool alone); {where}, a child runs a "
            f"piece when its script uses it, inside its sandbox; caps: {MAX_UNION} union options, {MAX_LITERALS} "
            f"enum values, {MAX_PROPERTIES} properties a class, {MAX_DEPTH} levels, {MAX_STUB_BYTES >> 10} KiB a "
            f"stub; the description lists groups past {self.max_listed_tools} tools or "
            f"{_size(self.max_listed_bytes)} of stubs",
        ]
        for name, why in sorted(bindings.left_out.items()):
            lines.append(f"  left out: tool {name!r}: {why}")
        for note in (note for _, note in sorted(bindings.renamed.items())):
            lines.append(f"  renamed: {note}")
        return lines

    # -- lifetime -----------------------------------------------------------------------------

    def held_fds(self) -> set[int]:
        """The fds this engine keeps open between runs: the spare children's pipe ends and the
        files of the session folder made ahead. Both are replaced after every run."""
        with self._lock:
            launcher = self._launcher
        return (launcher.held_fds() if launcher is not None else set()) | self.sessions.held_fds()

    def close(self) -> None:
        if self.nexus.durability is not None:
            # a durable backend is on (the next long-lived host takes over what this one leaves):
            # a run that journals is left resumable, not ended as the launcher closes
            self.leave_runs()
        self._closed = True
        with self._lock:
            launcher, self._launcher = self._launcher, None
        try:
            if launcher is not None:
                launcher.close()
        finally:
            self.sessions.close()
