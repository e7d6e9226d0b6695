"""The run_code child: the runtime a script sees, and the loop that runs one script.

Inside the child this module is also importable as `_nexus_rt`, the runtime the generated `tools`
module calls into. It talks to the host only over two pipe fds, in JSON lines:

host -> child: {"t": "start", ...}            the script, the bindings, skill helpers, settings
child -> host: {"t": "call", "id", "name", "args", "p"}   a tool call ("p": made inside parallel)
host -> child: {"t": "result", "id", "result"}            its ToolResult, as JSON
child -> host: {"t": "out", "s": "stdout"|"stderr", "d"}  output, as the script writes it
               (with "truncated": true on the message where max_output_bytes cut it)
child -> host: {"t": "done", "result"} | {"t": "error", "kind", "message"}   the end

The host treats everything the child sends as untrusted. Nothing here is a security boundary.
"""

from __future__ import annotations

import ast
import errno
import importlib.abc
import importlib.machinery
import itertools
import json
import os
import re
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable
from typing import Any

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from . import protocol
from .protocol import SCRIPT_FILENAME, PipeReader

#: the longest message the child reads from the host (the host is trusted: a START with the
#: bindings of many tools, a RESULT with a large output)
MAX_LINE = 64 * 1024 * 1024
#: characters of output per "out" message (at most 12 bytes each once JSON-escaped)
OUT_PIECE = 64 * 1024


# -- the runtime the bindings call ------------------------------------------------------------


class ToolError(Exception):
    """A tool call from the script did not succeed."""

    def __init__(self, tool: str, reason: str) -> None:
        super().__init__(f"{tool}: {reason}")
        self.tool = tool
        self.reason = reason


class ToolVetoed(ToolError):
    """A gate refused the call."""


class ToolFailed(ToolError):
    """The tool ran (or could not) and returned an error."""


@attrs.define(kw_only=True)
class Result:
    """What a tool without an output schema returns: its text output."""

    output: str = ""
    error: str | None = None
    output_file: str | None = None


def _json_overrides(cls: type) -> dict[str, Any]:
    return {f.name: override(rename=f.metadata["json"]) for f in attrs.fields(cls) if "json" in f.metadata}


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter()
    conv.register_structure_hook_factory(
        attrs.has, lambda cls: make_dict_structure_fn(cls, conv, **_json_overrides(cls))
    )
    conv.register_unstructure_hook_factory(
        attrs.has,
        lambda cls: make_dict_unstructure_fn(cls, conv, _cattrs_omit_if_default=True, **_json_overrides(cls)),
    )
    return conv


converter = _make_converter()
_channel: Channel | None = None
_local = threading.local()


def in_parallel() -> bool:
    return getattr(_local, "parallel", False)


def call_tool(name: str, args_cls: type, args: Any, kwargs: dict[str, Any], result_type: Any) -> Any:
    """Call tool `name` through the host; typed result, or ToolVetoed / ToolFailed."""
    if args is None:
        try:
            args = args_cls(**kwargs)
        except TypeError as exc:
            raise TypeError(f"tools.{name}: {exc}".replace("__init__() ", "")) from None
    elif kwargs:
        raise TypeError(f"tools.{name}: pass an {args_cls.__name__} or keywords, not both")
    if isinstance(args, dict):
        arguments = args
    elif isinstance(args, args_cls):  # another tool's Args class would only fail validation, less clearly
        arguments = converter.unstructure(args)
    else:
        raise TypeError(f"tools.{name}: expected {args_cls.__name__}, got {type(args).__name__}")
    assert _channel is not None, "the tools runtime is only available inside run_code"
    reply = _channel.request({"t": protocol.CALL, "name": name, "args": arguments, "p": in_parallel()})
    result = reply.get("result") or {}
    error = result.get("error")
    if error is not None:
        raise (ToolVetoed if result.get("error_kind") == "vetoed" else ToolFailed)(name, str(error))
    if result_type is Result:
        return Result(output=result.get("output", ""), output_file=result.get("output_file"))
    data = result.get("output_structured")
    if data is None:
        try:
            data = json.loads(result.get("output") or "null")
        except ValueError:
            raise ToolFailed(name, "its output is not the JSON its output schema promises") from None
    try:
        return converter.structure(data, result_type)
    except Exception as exc:
        detail = "; ".join(cattrs.transform_error(exc)) if isinstance(exc, cattrs.BaseValidationError) else str(exc)
        raise ToolFailed(name, f"its output does not match its output schema: {detail}") from None


# -- the pipe to the host ---------------------------------------------------------------------


class ChannelClosed(Exception):
    """The host went away (or sent something that is not a message)."""


class Channel:
    """The pipes to the host. Any thread may `request`; whichever waiting thread holds the
    reader role reads replies and hands them to their waiters (so a lone caller reads its own
    reply directly, with no thread hop)."""

    def __init__(self, rfd: int, wfd: int) -> None:
        self.rfd, self.wfd = rfd, wfd
        self._wlock = threading.Lock()
        self._cond = threading.Condition()
        self._replies: dict[int, dict[str, Any]] = {}
        self._reading = False
        self._closed: str | None = None
        self._lines = protocol.LineReader(MAX_LINE)
        self._ids = itertools.count(1)
        # answers usually come within microseconds of a call: the reader spins first (but not
        # while a spare waits for its script: `expect` turns it on)
        self._reader = PipeReader(rfd, eager=False)

    def send(self, msg: Any) -> None:
        data = _encode(msg)
        with self._wlock:
            protocol.write_all(self.wfd, data)

    def read_message(self) -> dict[str, Any]:
        try:
            msg = self._lines.read(self._reader.read)
        except protocol.FramingError as exc:
            raise ChannelClosed(str(exc)) from None
        if msg is None:
            raise ChannelClosed("the host closed the pipe")
        return msg

    def expect(self, window: float | None = None) -> None:
        """A message is coming soon: poll for it before sleeping (see protocol.PipeReader)."""
        self._reader.expect(window)

    def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        rid = next(self._ids)
        self.send({**msg, "id": rid})
        with self._cond:
            while True:
                if rid in self._replies:
                    return self._replies.pop(rid)
                if self._closed:
                    raise ChannelClosed(self._closed)
                if not self._reading:
                    self._reading = True
                    break
                self._cond.wait()
        try:
            while True:
                reply = self.read_message()
                with self._cond:
                    self._replies[reply.get("id", -1)] = reply
                    self._cond.notify_all()
                    if rid in self._replies:
                        self._reading = False
                        self._cond.notify_all()  # another waiter takes over reading
                        return self._replies.pop(rid)
        except BaseException as exc:
            with self._cond:
                self._reading = False
                self._closed = self._closed or str(exc) or type(exc).__name__
                self._cond.notify_all()
            raise


def _json_default(value: Any) -> Any:
    if attrs.has(type(value)):
        return converter.unstructure(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


#: the child's encoder: attrs instances from `tools` as their JSON form
_encode = protocol.encoder(default=_json_default)


# -- output ---------------------------------------------------------------------------------


class StreamWriter:
    """sys.stdout / sys.stderr for the script: lines (or 512-byte pieces) go to the host, up to
    the shared byte cap; past it output is dropped and `truncated` set."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, channel: Channel, stream: str, budget: list[int], flags: dict[str, bool]) -> None:
        self._channel = channel
        self._stream = stream
        self._budget = budget
        self._flags = flags
        self._pending = ""
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if self._flags["truncated"] and self._budget[0] <= 0:
            return len(text)  # past the cap nothing more is sent: do not buffer it either
        with self._lock:
            self._pending += text
            if "\n" in self._pending or len(self._pending) >= protocol.OUTPUT_PIECE:
                cut = self._pending.rfind("\n") + 1 or len(self._pending)
                self._emit(self._pending[:cut])
                self._pending = self._pending[cut:]
        return len(text)

    def _emit(self, text: str) -> None:
        data = text.encode("utf-8", "replace")
        first_cut = False
        if len(data) > self._budget[0]:
            data = data[: max(self._budget[0], 0)]
            text = data.decode("utf-8", "ignore")
            first_cut = not self._flags["truncated"]
            self._flags["truncated"] = True
        if not text and not first_cut:
            return
        self._budget[0] -= len(data)
        # in pieces: one print of 40 MB must not become one message past the host's line limit
        for at in range(0, max(len(text), 1), OUT_PIECE):
            msg: dict[str, Any] = {"t": protocol.OUT, "s": self._stream, "d": text[at:at + OUT_PIECE]}
            if first_cut and at + OUT_PIECE >= len(text):
                # told at once, not only in "done": a script that then fails or times out never
                # sends "done", and its result must still say the output was cut
                msg["truncated"] = True
            self._channel.send(msg)

    def flush(self) -> None:
        with self._lock:
            if self._pending:
                self._emit(self._pending)
                self._pending = ""

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True


# -- running one script ---------------------------------------------------------------------


@attrs.frozen
class Context:
    """What `run(ctx)` receives."""

    call_id: str
    timeout_seconds: float
    started: float = attrs.field(factory=time.monotonic)

    def remaining(self) -> float:
        """Seconds left before the script is stopped."""
        return max(0.0, self.timeout_seconds - (time.monotonic() - self.started))


def _script_line(tb: types.TracebackType | None) -> int | None:
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == SCRIPT_FILENAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _describe(exc: BaseException, source: str = "") -> str:
    refused = _refused_operation(exc, source)
    text = refused or str(exc)
    if not refused and isinstance(exc, OSError) and exc.errno is not None:
        text = exc.strerror or text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


_PROCESS_MODULES = ("subprocess.py", "popen_fork.py", "popen_spawn_posix.py", "pty.py")
_NETWORK_MODULES = ("socket.py", "ssl.py", "selectors.py")
_PROCESS_CALL = re.compile(r"\b(fork\w*|vfork|exec[lv]\w*|spawn\w*|posix_spawn\w*|system|popen|Popen)\b")
_NETWORK_CALL = re.compile(r"\b(socket|socketpair|connect|create_connection|create_server|bind)\b")
_SIGNAL_CALL = re.compile(r"\b(kill|killpg|pidfd_send_signal|pthread_kill|sigqueue)\b")


def _refused_operation(exc: BaseException, source: str) -> str | None:
    """For an operation the sandbox refused (EPERM/EACCES), what it was, in words: the module it
    was refused in, or else the script's own line that made the call."""
    if not isinstance(exc, OSError) or exc.errno not in (errno.EPERM, errno.EACCES):
        return None
    files = []
    tb = exc.__traceback__
    line = None
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        files.append(filename)
        if filename == SCRIPT_FILENAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    names = {f.rsplit("/", 1)[-1] for f in files}
    if names & set(_NETWORK_MODULES) or any("/http/" in f or "/urllib/" in f for f in files):
        return "network access is not allowed in run_code"
    if names & set(_PROCESS_MODULES) or any("/multiprocessing/" in f for f in files):
        return "starting processes is not allowed in run_code"
    text = ""
    if line is not None and source:
        lines = source.splitlines()
        text = lines[line - 1] if 0 < line <= len(lines) else ""
    if _PROCESS_CALL.search(text):
        return "starting processes is not allowed in run_code"
    if _NETWORK_CALL.search(text):
        return "network access is not allowed in run_code"
    if _SIGNAL_CALL.search(text):
        return "signalling other processes is not allowed in run_code"
    if exc.filename is not None:
        return f"access to {str(exc.filename)!r} is not allowed in run_code"
    return None


def dump_code(tree: Any) -> protocol.CompiledCode:
    """The script's code, compiled (by the host, from the AST its check parsed) for the child."""
    return protocol.pack_code(compile(tree, SCRIPT_FILENAME, "exec", dont_inherit=True))


def load_code(start: dict[str, Any]) -> types.CodeType:
    """The script's code object: loaded from what the host compiled when it is for this
    interpreter's bytecode (a child's first compile pays for every page the compiler touches,
    ~0.3 ms, against ~20 us for this), else compiled here from the source. The host is trusted;
    what the child runs is the script either way."""
    code = protocol.unpack_code(start.get("code"))
    if code is not None:
        return code
    return compile(start["script"], SCRIPT_FILENAME, "exec", dont_inherit=True)


_SAMPLE_START = json.dumps({
    "t": protocol.START, "call_id": "call_sample", "script": "def run(ctx):\n    return 1\n",
    "code": dump_code(ast.parse("def run(ctx):\n    return 1\n", SCRIPT_FILENAME)),
    "bindings_key": "", "skills": {}, "max_workers": 1, "max_output_bytes": 1, "max_result_bytes": 1, "timeout": 1,
})

#: bindings the zygote compiled ahead of the fork, by key
PRELOADED_BINDINGS: dict[str, types.ModuleType] = {}


def warm_bindings(tools: types.ModuleType) -> None:
    """Have cattrs generate its (un)structure functions for every class in `tools` now: done
    once in the zygote, it is not done again (and copied on write) in every child's first call."""
    for value in list(vars(tools).values()):
        if isinstance(value, type) and attrs.has(value):
            converter.get_unstructure_hook(value)
            converter.get_structure_hook(value)


def compile_bindings(source: str) -> types.ModuleType:
    """The `tools` module built from its generated source."""
    sys.modules["_nexus_rt"] = sys.modules[__name__]
    tools = types.ModuleType("tools", "Typed bindings for the tools of this Nexus.")
    tools.__file__ = "tools.py"
    exec(compile(source, "tools.py", "exec", dont_inherit=True), tools.__dict__)
    return tools


class Stage:
    """What a run needs that does not depend on its script: set up by a spare before its script
    comes, so that the run does not pay for it (in a fresh fork, mostly page faults)."""

    def __init__(self, channel: Channel) -> None:
        from . import _parallel

        self.channel = channel
        self.budget = [65536]
        self.flags = {"truncated": False}
        self.out = StreamWriter(channel, "stdout", self.budget, self.flags)
        self.err = StreamWriter(channel, "stderr", self.budget, self.flags)
        self.parallel: Any = _parallel  # its MAX_WORKERS is set per run
        self.skills = types.ModuleType("skills", "Helpers of the active skills.")
        self.skills.__path__ = []
        self.finder = SkillHelpers({})
        self.module = types.ModuleType("__script__")
        self.module.__file__ = SCRIPT_FILENAME
        self._compiled: tuple[str, types.CodeType] | None = None
        # the start message's way through this process, once, on a sample (made in the zygote):
        # its first pass through the JSON decoder, base64 and marshal costs ~0.3 ms of page
        # faults in a fresh fork, better paid while nobody waits
        sample = json.loads(_SAMPLE_START)
        exec(load_code(sample), types.ModuleType("__sample__").__dict__)

    def precompile(self, script: Any) -> None:
        """Compile the script the host said is coming, while the host checks it (it runs only
        once the start message comes, which names the same script). A script that does not
        compile is left for the start, where its error is reported as usual."""
        if isinstance(script, str):
            try:
                self._compiled = (script, compile(script, SCRIPT_FILENAME, "exec", dont_inherit=True))
            except Exception:  # noqa: BLE001 - the host's check reports it, or the start does
                self._compiled = None

    def code_for(self, start: dict[str, Any]) -> types.CodeType:
        """The code of the start's script: compiled already from the same source, or loaded
        from what the host sent."""
        if self._compiled is not None and self._compiled[0] == start.get("script") and "code" not in start:
            return self._compiled[1]
        return load_code(start)


def install_modules(start: dict[str, Any], stage: Stage) -> None:
    """Put `_nexus_rt`, `tools`, `parallel` and `skills.<name>` in sys.modules."""
    sys.modules["_nexus_rt"] = sys.modules[__name__]
    stage.parallel.MAX_WORKERS = int(start.get("max_workers") or 1)
    sys.modules["parallel"] = stage.parallel
    tools = PRELOADED_BINDINGS.get(start.get("bindings_key") or "")
    if tools is None:
        if "bindings" not in start:
            raise RuntimeError("the host sent no bindings, and this process has none compiled")
        tools = compile_bindings(start["bindings"])
    sys.modules["tools"] = tools
    sys.modules["skills"] = stage.skills
    stage.finder.skills = start.get("skills") or {}
    sys.meta_path[:] = [stage.finder] + [f for f in sys.meta_path if not isinstance(f, SkillHelpers)]


class SkillHelpers(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports `skills.<name>` from the helper sources the host sent, when the script imports
    it: one active skill with a helper that cannot load here (a library that is not installed,
    a command-line script) then fails only the scripts that import that skill, not every script."""

    def __init__(self, skills: dict[str, list[tuple[str, str]]]) -> None:
        self.skills = skills

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        package, _, name = fullname.partition(".")
        if package != "skills" or name not in self.skills:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, origin=f"skills/{name}/__init__.py")

    def create_module(self, spec: Any) -> None:
        return None  # the default module

    def exec_module(self, module: types.ModuleType) -> None:
        name = module.__name__.partition(".")[2]
        module.__file__ = f"skills/{name}/__init__.py"
        for filename, source in self.skills[name]:
            exec(compile(source, f"skills/{name}/{filename}", "exec", dont_inherit=True), module.__dict__)


def run_script(channel: Channel, start: dict[str, Any], stage: Stage | None = None) -> dict[str, Any]:
    """Run the script of `start`; the final message to send ("done" or "error")."""
    global _channel
    _channel = channel
    stage = stage or Stage(channel)
    stage.budget[0] = int(start.get("max_output_bytes", 65536))
    flags, out, err, module = stage.flags, stage.out, stage.err, stage.module
    sys.stdout, sys.stderr = out, err
    try:
        install_modules(start, stage)
        code = stage.code_for(start)
        exec(code, module.__dict__)
        run: Callable[[Any], Any] = module.__dict__["run"]
        value = run(Context(call_id=start.get("call_id", ""), timeout_seconds=float(start.get("timeout", 30))))
    except MemoryError:
        out.flush()
        err.flush()
        return {"t": protocol.ERROR, "kind": protocol.MEMORY, "message": "memory limit exceeded"}
    except BaseException as exc:  # the script's SystemExit and KeyboardInterrupt too
        out.flush()
        err.flush()
        line = _script_line(exc.__traceback__)
        where = f"line {line}: " if line else ""
        return {"t": protocol.ERROR, "kind": protocol.RUNTIME, "message": f"{where}{_describe(exc, start.get('script', ''))}",
                "traceback": "".join(traceback.format_exception(exc))[-4000:]}
    out.flush()
    err.flush()
    try:
        text = json.dumps(value, default=_json_default, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        return {"t": protocol.ERROR, "kind": protocol.UNSERIALIZABLE, "message": str(exc)}
    limit = int(start.get("max_result_bytes", 1 << 20))
    if len(text) > limit:
        return {"t": protocol.ERROR, "kind": protocol.TOO_LARGE, "message": f"{len(text)} bytes (the limit is {limit})"}
    return {"t": protocol.DONE, "result": text, "truncated": flags["truncated"]}


def serve(rfd: int, wfd: int, start: dict[str, Any] | None = None) -> None:
    """Run one script: read its start message (unless given), run it, report, flush."""
    channel = Channel(rfd, wfd)
    try:
        stage = Stage(channel)
        while start is None:
            msg = channel.read_message()
            if msg.get("t") == protocol.WAKE:  # its script is on its way: compile it, poll for the start
                channel.expect(min(float(msg.get("spin") or 0), 20000.0) / 1e6)
                stage.precompile(msg.get("script"))
                continue
            start = msg
        if start.get("spin"):
            # the host keeps this process off the CPU of the thread that reads it: polling
            # for the answers does not take their CPU (otherwise the waits turn polling on)
            channel.expect()
        final = run_script(channel, start, stage)
    except ChannelClosed:
        return
    try:
        channel.send(final)
    except OSError:
        pass


def main() -> None:
    """`python -I -m nexus_tool_code_exec._child POLICY_JSON`: the fresh-interpreter launcher's
    child. The protocol runs on fds 0 and 1, which are then pointed at /dev/null."""
    rfd, wfd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    policy = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    if policy.get("layers"):
        try:
            from ._launch import enter_sandbox

            enter_sandbox(policy, keep_fds=(rfd, wfd))
        except Exception as exc:  # report it on the protocol: the host turns it into the error
            Channel(rfd, wfd).send({"t": protocol.ERROR, "kind": protocol.SANDBOX, "message": _describe(exc)})
            os._exit(1)
    serve(rfd, wfd)
    sys.stdout = sys.__stdout__
    sys.stderr = sys.__stderr__
    os._exit(0)


if __name__ == "__main__":
    main()
