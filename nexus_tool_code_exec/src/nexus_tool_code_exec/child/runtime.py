"""The runtime a script runs in (runs in the child). Inside the child this module is also
importable as `_nexus_rt`: the runtime that the generated `tools` module calls into.

A child's life, with the messages of protocol.py:

    isolate      enter the sandbox the host's policy asks for (or report why not, and exit)
    Stage        set up what every run needs, while it waits for its script (a spare waits long)
    START        install `tools`, `parallel`, `skills`; run `run(ctx)`; each tool call is a CALL
                 to the host, which answers with a RESULT; output goes as OUT messages
    DONE/ERROR   the end: run's return value as JSON, or what went wrong; then the process exits

The host treats everything the child sends as untrusted. Nothing here is a security boundary.
"""

from __future__ import annotations

import builtins
import difflib
import importlib.abc
import importlib.machinery
import json
import os
import reprlib
import signal
import sys
import threading
import time
import traceback
import types
import typing
from collections.abc import Callable
from typing import Any, Literal

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from .. import protocol
from ..protocol import SCRIPT_FILENAME
from .channel import MAX_LINE, Channel, ChannelClosed
from .errors import describe, script_line, unserializable
from .output import MARKER_RESERVE, StreamWriter, Tail

# -- the runtime the bindings call ------------------------------------------------------------


class ToolError(Exception):
    """A tool call from the script did not succeed."""

    def __init__(self, tool: str, reason: str) -> None:
        super().__init__(f"{tool}: {reason}")
        self.tool = tool
        self.reason = reason


class ToolVetoed(ToolError):
    """A gate refused the call. `.reason` is the gate's reason alone (the host's error text
    starts with `vetoed: `, which the message keeps)."""

    def __init__(self, tool: str, reason: str) -> None:
        reason = reason.removeprefix("vetoed: ")
        super().__init__(tool, reason)
        self.args = (f"{tool}: vetoed: {reason}",)


class ToolFailed(ToolError):
    """The tool ran (or could not) and returned an error."""


_DICT_METHODS = frozenset({"get", "keys", "items", "values", "pop", "setdefault", "update", "copy"})


def _field_names(cls: type) -> list[str]:
    return [f.name for f in attrs.fields(cls)] if attrs.has(cls) else []


class Record:
    """The base of every class in `tools`: a result is an object with attributes, and a script
    that treats it as a dict (`r["content"]`, `r.get("content")`) or guesses a field is told
    which fields there are."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        cls = type(self).__name__
        fields = _field_names(type(self))
        if name in _DICT_METHODS and name not in fields:
            raise AttributeError(f"{cls} is an object, not a dict: read its fields as attributes "
                                 f"({', '.join('.' + f for f in fields) or 'it has none'})")
        close = difflib.get_close_matches(name, fields, n=1, cutoff=0.6)
        hint = f"; did you mean .{close[0]}?" if close else ""
        raise AttributeError(f"{cls} has no attribute {name!r}{hint} (its fields: {', '.join(fields) or 'none'})")

    def __getitem__(self, key: Any) -> Any:
        cls = type(self).__name__
        fields = _field_names(type(self))
        if isinstance(key, str) and key in fields:
            raise TypeError(f"{cls} is an object, not a dict: write .{key}, not [{key!r}]")
        raise TypeError(f"{cls} is an object, not a dict: read its fields as attributes "
                        f"({', '.join('.' + f for f in fields) or 'it has none'})")

    # One __repr__ and __eq__ for every generated class, as attrs would write them: attrs makes
    # (and compiles) a pair per class, and the classes of `tools` are made in each child that
    # uses them (see `bindings_module`); the runtime's own classes keep attrs' own.
    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        values = ", ".join(f"{name}={getattr(self, name, attrs.NOTHING)!r}" for name in _field_names(type(self)))
        return f"{type(self).__qualname__}({values})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in _field_names(type(self)))

    __hash__ = None  # type: ignore[assignment]  # mutable, as attrs' own eq=True classes are


@attrs.define(kw_only=True)
class Result(Record):
    """What a tool without an output schema returns: its text output."""

    output: str = ""
    error: str | None = None
    output_file: str | None = None


def _json_overrides(cls: type) -> dict[str, Any]:
    return {f.name: override(rename=f.metadata["json"]) for f in attrs.fields(cls) if "json" in f.metadata}


def _tolerant(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """An unstructure function that lets a dict through where a class is expected: a script may
    write a nested argument as a dict (`todos=[{"content": ...}]`); the host validates it."""

    def unstructure(obj: Any) -> Any:
        return obj if isinstance(obj, dict) else fn(obj)

    return unstructure


def _make_detailed_converter() -> cattrs.Converter:
    """cattrs' own (un)structure functions, generated and compiled per class: exact, with errors
    that name the field. Each costs a compile (~0.3 ms), so a run uses them only to say why a
    value did not fit (`_make_converter`'s functions are the fast path)."""
    conv = cattrs.Converter()
    conv.register_structure_hook_factory(
        attrs.has, lambda cls: make_dict_structure_fn(cls, conv, **_json_overrides(cls))
    )
    conv.register_unstructure_hook_factory(
        attrs.has,
        lambda cls: _tolerant(make_dict_unstructure_fn(cls, conv, _cattrs_omit_if_default=True,
                                                       **_json_overrides(cls))),
    )
    return conv


_PLAIN = (str, int, float, bool)


def _taken_as_is(typ: Any) -> tuple[type, ...] | bool:
    """The types a value of a field typed `typ` may already have to be what cattrs would make of
    it (`str` for `str | None`), True for any (`Any`), False for "ask cattrs"."""
    if typ is Any:
        return True
    if typ in _PLAIN:
        return (typ,)
    args = typing.get_args(typ)
    if isinstance(typ, types.UnionType) and len(args) == 2 and type(None) in args:
        other = args[0] if args[1] is type(None) else args[1]
        if other in _PLAIN:
            return (other, type(None))
    return False


def _make_converter() -> cattrs.Converter:
    """The converter of `tools`' classes: JSON names kept (`metadata={"json": ...}`), optional
    fields left out when None, a dict let through where a class is expected. Its functions read
    each class's fields once and loop over them, where cattrs' own generate code per class: a
    class is made in the child that first uses its tool, and cattrs' compile for each would cost
    that run more than its calls. A value that does not fit is structured again by cattrs' own
    (`_detailed`), for its exact error."""
    conv = cattrs.Converter()

    def structure_factory(cls: type) -> Callable[[Any, Any], Any]:
        plan = [(f.metadata.get("json", f.name), f.alias or f.name, f.type, _taken_as_is(f.type))
                for f in attrs.fields(cls)]
        structure = conv.structure

        def structure_record(data: Any, _: Any) -> Any:
            try:
                values = {}
                for key, keyword, typ, as_is in plan:
                    if key in data:
                        value = data[key]
                        taken = as_is is True or (isinstance(as_is, tuple) and type(value) in as_is)
                        values[keyword] = value if taken else structure(value, typ)
                return cls(**values)
            except Exception:
                return _detailed.structure(data, cls)  # raises what cattrs says is wrong (or agrees)

        return structure_record

    def unstructure_factory(cls: type) -> Callable[[Any], Any]:
        plan = [(f.name, f.metadata.get("json", f.name), f.default is None) for f in attrs.fields(cls)]
        unstructure = conv.unstructure

        def unstructure_record(obj: Any) -> Any:
            if isinstance(obj, dict):
                return obj
            out = {}
            for name, key, optional in plan:
                value = getattr(obj, name)
                if value is None and optional:
                    continue
                out[key] = value if value is None or type(value) in _PLAIN else unstructure(value)
            return out

        return unstructure_record

    conv.register_structure_hook_factory(attrs.has, structure_factory)
    conv.register_unstructure_hook_factory(attrs.has, unstructure_factory)
    return conv


converter = _make_converter()
_detailed = _make_detailed_converter()
#: the pipes to the host, set when a script starts
_channel: Channel | None = None
class _PerThread(threading.local):
    """What each thread of the script's process says of itself: `parallel`, the `parallel` call
    whose callback it runs (1, 2, ...; parallel.py sets it on its workers), 0 for any other.
    A class attribute, so that reading it on a thread that never set it finds 0 at once (a
    `getattr(local, name, default)` that misses raises and catches an AttributeError inside,
    1 us on every inner call, twice)."""

    parallel: int = 0


#: per thread: whether it is one of parallel's workers (parallel.py sets it)
_local = _PerThread()


def in_parallel() -> bool:
    return bool(_local.parallel)


def parallel_group() -> int:
    """Which `parallel` call of the script this thread's callbacks belong to (1, 2, ...), or 0."""
    group = _local.parallel
    return group if isinstance(group, int) and not isinstance(group, bool) else 0


def _a(noun: str) -> str:
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


def signature_of(name: str) -> str:
    """How the stubs show tool `name`'s function: `read(*, path: str, ...) -> ReadResult`."""
    tools = sys.modules.get("tools")
    signatures = getattr(tools, "_SIGNATURES", None) or {}
    return str(signatures.get(name) or f"{name}(...)")


def _bad_call(name: str, args_cls: type, kwargs: dict[str, Any]) -> TypeError:
    """Why keywords do not fit a tool's Args class, with the function's real signature."""
    fields = {f.alias or f.name: f for f in attrs.fields(args_cls)}
    unknown = [k for k in kwargs if k not in fields]
    if unknown:
        close = difflib.get_close_matches(unknown[0], list(fields), n=1, cutoff=0.6)
        if close:
            return TypeError(f"tools.{name}() has no argument {unknown[0]!r}; did you mean {close[0]!r}? "
                             f"It is {signature_of(name)}")
        problem = f"tools.{name}() has no argument {unknown[0]!r}"
    else:
        missing = [k for k, f in fields.items() if f.default is attrs.NOTHING and k not in kwargs]
        problem = f"tools.{name}() is missing its required argument {missing[0]!r}" if missing \
            else f"tools.{name}() cannot take these arguments"
    return TypeError(f"{problem}: it is {signature_of(name)}")


def _script_line() -> int | None:
    """The script's line that is calling (through `tools`, parallel's workers, a lambda)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename == SCRIPT_FILENAME:
            return frame.f_lineno
        frame = frame.f_back  # type: ignore[assignment]  # None past the bottom
    return None


def call_tool(name: str, args_cls: type | None, args: Any, kwargs: dict[str, Any], result_type: Any) -> Any:
    """Call tool `name` through the host; typed result, or ToolVetoed / ToolFailed. A tool
    whose schemas were past the bindings' caps has no Args class (`args_cls` None): its
    keywords (or one dict) are its arguments as they are, and the host checks them."""
    if args_cls is None:
        if args is not None and (kwargs or not isinstance(args, dict)):
            raise TypeError(f"tools.{name}() takes keyword arguments or one dict: it is {signature_of(name)}")
        arguments = dict(kwargs) if args is None else args
    else:
        if args is None:
            try:
                args = args_cls(**kwargs)
            except TypeError:
                raise _bad_call(name, args_cls, kwargs) from None
        elif kwargs:
            raise TypeError(f"tools.{name}() takes {_a(args_cls.__name__)} or keywords, not both: "
                            f"it is {signature_of(name)}")
        if isinstance(args, dict):
            arguments = args
        elif isinstance(args, args_cls):  # another tool's Args class would only fail validation, less clearly
            arguments = converter.unstructure(args)
        else:
            raise TypeError(f"tools.{name}() takes keyword arguments (or {_a(args_cls.__name__)}), not "
                            f"{_a(type(args).__name__)}: it is {signature_of(name)}")
    assert _channel is not None, "the tools runtime is only available inside run_code"
    msg: dict[str, Any] = {"t": protocol.CALL, "name": name, "args": arguments, "p": in_parallel()}
    line = _script_line()
    if line is not None:
        msg["line"] = line
    group = parallel_group()
    if group:
        msg["g"] = group
    reply = _channel.request(msg)
    result = reply.get("result") or {}
    error = result.get("error")
    if error is not None:
        raise (ToolVetoed if result.get("error_kind") == "vetoed" else ToolFailed)(name, str(error))
    if result_type is Result:
        return Result(output=result.get("output", ""), output_file=result.get("output_file"))
    data = result.get("output_structured")
    if data is None and result_type is str:  # a text result is its output, whether or not it is JSON
        return result.get("output", "")
    if data is None:
        try:
            data = json.loads(result.get("output") or "null")
        except ValueError:
            raise ToolFailed(name, _misbehaved("is not the JSON its output schema promises",
                                               result.get("output") or "")) from None
    try:
        return converter.structure(data, result_type)
    except Exception as exc:
        detail = "; ".join(cattrs.transform_error(exc)) if isinstance(exc, cattrs.BaseValidationError) else str(exc)
        try:
            shown = json.dumps(data, ensure_ascii=False, default=str)
        except (TypeError, ValueError, RecursionError):
            shown = repr(data)
        raise ToolFailed(name, _misbehaved(f"does not match its own output schema ({detail})", shown)) from None


#: how much of a result that breaks its tool's output schema the error shows
MISBEHAVED_SHOWN_CHARS = 300


def _misbehaved(what: str, returned: str) -> str:
    """A tool's result that breaks its own contract: the tool's fault, not the call's, and the
    call may have done its work (its effect happened; only its result cannot be read)."""
    start = returned[:MISBEHAVED_SHOWN_CHARS] + (" ..." if len(returned) > MISBEHAVED_SHOWN_CHARS else "")
    return (f"the tool misbehaved: its result {what}; the call itself was not wrong, and its effect may have "
            f"happened. It returned: {start}")


def _json_default(value: Any) -> Any:
    if attrs.has(type(value)):
        return converter.unstructure(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


#: the child's encoder: attrs instances from `tools` as their JSON form
_encode = protocol.encoder(default=_json_default)


#: how long before its deadline a script's child first says which line is running, and how often
#: after that (a paused clock moves the deadline on: the last report before the kill counts)
WHERE_AHEAD = 0.25
WHERE_EVERY = 0.1


# -- the `tools` module ------------------------------------------------------------------------
#
# The bindings come from the host as one piece per tool (protocol.BindingsPayload), each checked
# and compiled there on its own. The zygote compiles them again (`compile_pieces`: compiling
# runs nothing), so that its children need not; only a child, inside its sandbox, executes a
# piece, and only when its script first uses one of its names (`bindings_module`): a script that
# calls two tools makes two tools' classes, a trivial one none. A piece that fails to load is
# that tool's failure alone: its function raises ToolFailed saying why.


@attrs.frozen
class CompiledBindings:
    """A `BindingsPayload` with each piece's code compiled (None where that failed: the child
    compiles it again when it is used, and reports why it could not)."""

    pieces: tuple[tuple[protocol.BindingsPiece, types.CodeType | None], ...]
    signatures: dict[str, str]


def compile_pieces(payload: protocol.BindingsPayload, now: bool = True) -> CompiledBindings:
    """The pieces of `payload`, compiled (`now`) or to be compiled when used. Runs none of them."""
    pieces = []
    for piece in payload.get("pieces") or ():
        code = None
        if now:
            try:
                code = compile(piece["source"], "tools.py", "exec", dont_inherit=True)
            except Exception:  # noqa: BLE001 - the child says why, if a script uses it
                code = None
        pieces.append((piece, code))
    return CompiledBindings(tuple(pieces), dict(payload.get("signatures") or {}))


#: the names every `tools` module has, the runtime's own (the pieces' code reads them too)
def _runtime_names() -> dict[str, Any]:
    return {"Any": Any, "Literal": Literal, "attrs": attrs, "_Record": Record, "_call": call_tool,
            "Result": Result, "ToolError": ToolError, "ToolVetoed": ToolVetoed, "ToolFailed": ToolFailed}


class _LazyBindings:
    """The `__getattr__` of a `tools` module: a name not made yet is made by executing its
    tool's piece, in a namespace of its own (the runtime's names and the builtins, then its own
    classes: a tool function named `list` in one piece shadows nothing in another), whose names
    are then copied into the module."""

    def __init__(self, module: types.ModuleType, compiled: CompiledBindings) -> None:
        self.module = module
        self.compiled = compiled
        self.pending: dict[str, int] = {}
        for index, (piece, _) in enumerate(compiled.pieces):
            for name in piece.get("names") or ():
                self.pending[name] = index
        #: names of pieces that failed to load -> why
        self.failed: dict[str, str] = {}
        self._lock = threading.RLock()

    def __call__(self, name: str) -> Any:
        with self._lock:
            namespace = self.module.__dict__
            if name in namespace:
                return namespace[name]
            index = self.pending.get(name)
            if index is not None:
                self.load(index)
                if name in namespace:
                    return namespace[name]
        if name in self.failed:
            raise AttributeError(f"tools.{name} is not available: {self.failed[name]}")
        raise AttributeError(f"module 'tools' has no attribute {name!r}")

    def load(self, index: int) -> None:
        piece, code = self.compiled.pieces[index]
        names = list(piece.get("names") or ())
        for name in names:
            self.pending.pop(name, None)
        ns: dict[str, Any] = {"__name__": "tools", "__builtins__": builtins, **_runtime_names()}
        try:
            if code is None:
                code = compile(piece["source"], "tools.py", "exec", dont_inherit=True)
            exec(code, ns)
            made = {name: ns[name] for name in names}
        except Exception as exc:  # noqa: BLE001 - this tool's failure alone
            tool = str(piece.get("tool") or "")
            why = f"the bindings of tool {tool!r} could not be loaded in the sandbox ({describe(exc)})"
            for name in names:
                self.failed[name] = why
            function = piece.get("function")
            if function:
                self.module.__dict__[function] = _unavailable(tool, why)
            return
        self.module.__dict__.update(made)

    def load_all(self) -> None:
        with self._lock:
            for index in sorted(set(self.pending.values())):
                self.load(index)

    def dir(self) -> list[str]:
        return sorted(set(self.module.__dict__) | set(self.pending))


def _unavailable(tool: str, why: str) -> Callable[..., Any]:
    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise ToolFailed(tool, why)

    return unavailable


def bindings_module(compiled: CompiledBindings) -> types.ModuleType:
    """A `tools` module over `compiled`: the runtime's names now, each tool's when first used."""
    sys.modules["_nexus_rt"] = sys.modules[__name__]
    tools = types.ModuleType("tools", "Typed bindings for the tools of this Nexus.")
    tools.__file__ = "tools.py"
    tools.__dict__.update(_runtime_names())
    tools.__dict__["_SIGNATURES"] = compiled.signatures
    lazy = _LazyBindings(tools, compiled)
    tools.__dict__["__getattr__"] = lazy
    tools.__dict__["__dir__"] = lazy.dir
    public = [name for name in lazy.pending if not name.startswith("_")]
    tools.__dict__["__all__"] = sorted({*public, "Result", "ToolError", "ToolVetoed", "ToolFailed"})
    return tools


def compile_bindings(source: str) -> types.ModuleType:
    """The whole `tools` module from one source (`Bindings.source`), executed at once: for a
    reader or a test. A run's child makes `bindings_module` of the pieces instead."""
    sys.modules["_nexus_rt"] = sys.modules[__name__]
    tools = types.ModuleType("tools", "Typed bindings for the tools of this Nexus.")
    tools.__file__ = "tools.py"
    exec(compile(source, "tools.py", "exec", dont_inherit=True), tools.__dict__)
    return tools


#: bindings the zygote compiled ahead of the fork, by key
PRELOADED_BINDINGS: dict[str, CompiledBindings] = {}


# -- isolating the process ------------------------------------------------------------------


def sandbox_policy(policy: protocol.ChildPolicy) -> Any:
    """The `sandbox.SandboxPolicy` of `policy` but for what each child has of its own (its
    scratch folder, its fds, its parent), for a zygote to make once before it forks and give
    to `isolate`: building it in each fresh fork wrote to ~30 pages, each a copy. None for a
    policy of no layer, or one that cannot be made (each child's `isolate` then says why)."""
    if not policy.get("layers"):
        return None
    try:
        from .. import sandbox

        return sandbox.SandboxPolicy(
            scratch_dir=policy.get("scratch", ""),
            read_paths=tuple(policy["read_paths"]),
            limits=sandbox.Limits(**policy["limits"]),
            layers=frozenset(policy["layers"]),
            net_fd=policy.get("net_fd"),
        )
    except Exception:  # noqa: BLE001 - reported by each child's isolate, with its layer
        return None


def isolate(policy: protocol.ChildPolicy, rfd: int, wfd: int, made: Any = None) -> None:
    """Enter the sandbox `policy` asks for, keeping only the two pipe fds (and closing every
    other). `made` is `sandbox_policy(policy)`, made before the fork (its scratch folder, fds and
    parent are this child's own, from `policy`). Where it cannot be entered, tell the host (an
    ERROR of kind SANDBOX: the script never ran) and exit."""
    if not policy.get("layers"):
        # no layer at all (none works here): still a process group of its own, which the
        # timeout kills whole, and the scratch folder as the working directory
        if os.getpgrp() != os.getpid():
            os.setpgid(0, 0)
        if "scratch" in policy:
            os.chdir(policy["scratch"])
        return
    try:
        from .. import sandbox

        if made is not None:
            sandbox.enter(made, scratch_dir=policy["scratch"], keep_fds=(rfd, wfd), parent=policy.get("parent"))
        else:
            sandbox.enter(sandbox.SandboxPolicy(
                scratch_dir=policy["scratch"],
                read_paths=tuple(policy["read_paths"]),
                limits=sandbox.Limits(**policy["limits"]),
                layers=frozenset(policy["layers"]),
                keep_fds=(rfd, wfd),
                net_fd=policy.get("net_fd"),
                parent=policy.get("parent"),
            ))
    except Exception as exc:  # the host turns it into the run's error
        Channel(rfd, wfd).send({"t": protocol.ERROR, "kind": protocol.SANDBOX, "message": describe(exc)})
        os._exit(1)


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


def load_code(start: dict[str, Any]) -> types.CodeType:
    """The script's code object: loaded from what the host compiled when it is for this
    interpreter's bytecode (a child's first compile pays for every page the compiler touches,
    ~0.3 ms, against ~20 us for this), else compiled here from the source. The host is trusted;
    what the child runs is the script either way."""
    code = protocol.unpack_code(start.get("code"))
    if code is not None:
        return code
    return compile(start["script"], SCRIPT_FILENAME, "exec", dont_inherit=True)


#: a START as the host sends it, for the zygote to take through the path a real one takes
_SAMPLE_START = protocol.encode({
    "t": protocol.START, "call_id": "call_sample", "script": "def run(ctx):\n    return 1\n",
    "code": protocol.pack_code(compile("def run(ctx):\n    return 1\n", SCRIPT_FILENAME, "exec", dont_inherit=True)),
    "bindings_key": "", "skills": {}, "max_workers": 1, "max_output_bytes": 1, "max_result_bytes": 1, "timeout": 1,
})


def warm_up() -> None:
    """In the zygote, before it forks: a start message's way through this module, on a sample,
    a few times over. What that leaves (the JSON decoder's and base64's lazily built parts,
    marshal's, the interpreter's specialised code for these functions) every child then has,
    instead of building it into pages of its own: in a fresh fork each first pass costs page
    faults, paid by every run."""
    for _ in range(16):
        lines = protocol.LineReader(MAX_LINE)
        lines.feed(_SAMPLE_START)
        sample = lines.next()
        assert sample is not None
        module = types.ModuleType("__sample__")
        exec(load_code(sample), module.__dict__)
        value = module.__dict__["run"](Context(call_id="call_sample", timeout_seconds=1.0))
        _encode({"t": protocol.DONE, "result": json.dumps(value, default=_json_default, allow_nan=False),
                 "truncated": False})


class Stage:
    """What a run needs that does not depend on its script: set up by a spare before its script
    comes, so that the run does not pay for it."""

    def __init__(self, channel: Channel) -> None:
        from . import parallel

        self.channel = channel
        self.budget = [65536]
        self.flags = {"truncated": False}
        self.tail = Tail()
        self.out = StreamWriter(channel, "stdout", self.budget, self.flags, self.tail)
        self.err = StreamWriter(channel, "stderr", self.budget, self.flags, self.tail)
        self.parallel: Any = parallel  # its MAX_WORKERS is set per run
        self.skills = types.ModuleType("skills", "Helpers of the active skills.")
        self.skills.__path__ = []
        self.finder = SkillHelpers({})
        self.module = types.ModuleType("__script__")
        self.module.__file__ = SCRIPT_FILENAME
        signal.signal(signal.SIGALRM, self.report_where)

    def report_where(self, signum: int, frame: types.FrameType | None) -> None:
        """SIGALRM, near the deadline and every WHERE_EVERY seconds after: tell the host which of
        the script's lines is running, so that a timeout can name it. Sent only when no other
        thread (nor the code this handler interrupted) is writing to the pipe."""
        line = None
        while frame is not None:
            if frame.f_code.co_filename == SCRIPT_FILENAME:
                line = frame.f_lineno
                break
            frame = frame.f_back
        if line is None:
            return
        lock = self.channel._wlock
        if lock.acquire(blocking=False):
            try:
                protocol.write_all(self.channel.wfd, protocol.encode({"t": protocol.WHERE, "line": line}))
            except OSError:
                pass
            finally:
                lock.release()


def install_modules(start: dict[str, Any], stage: Stage) -> None:
    """Put `_nexus_rt`, `tools`, `parallel` and `skills.<name>` in sys.modules."""
    sys.modules["_nexus_rt"] = sys.modules[__name__]
    stage.parallel.MAX_WORKERS = int(start.get("max_workers") or 1)
    sys.modules["parallel"] = stage.parallel
    compiled = PRELOADED_BINDINGS.get(start.get("bindings_key") or "")
    if compiled is None:
        if "bindings" not in start:
            raise RuntimeError("the host sent no bindings, and this process has none compiled")
        compiled = compile_pieces(start["bindings"], now=False)  # each piece when it is used
    sys.modules["tools"] = bindings_module(compiled)
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
    """Run the script of `start`; the final message to send (DONE or ERROR)."""
    global _channel
    _channel = channel
    stage = stage or Stage(channel)
    cap = int(start.get("max_output_bytes", 65536))
    if cap >= 4 * MARKER_RESERVE:
        # the first half of the cap goes out as it is written; of the rest, only the last part
        stage.budget[0] = cap - cap // 2
        stage.tail.reset(cap // 2 - MARKER_RESERVE)
    else:  # too small to split: the head alone
        stage.budget[0] = cap
        stage.tail.reset(0)
    flags, out, err, module = stage.flags, stage.out, stage.err, stage.module
    sys.stdout, sys.stderr = out, err
    source = start.get("script", "")
    timeout = float(start.get("timeout", 30))
    # near the deadline the child says which line runs, so that the host's "timed out" names it
    signal.setitimer(signal.ITIMER_REAL, max(timeout - WHERE_AHEAD, timeout / 2), WHERE_EVERY)

    dropped = [0]

    def finish_output() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        out.flush()
        err.flush()
        dropped[0] = stage.tail.send(channel)

    try:
        install_modules(start, stage)
        exec(load_code(start), module.__dict__)
        run: Callable[[Any], Any] = module.__dict__["run"]
        value = run(Context(call_id=start.get("call_id", ""), timeout_seconds=float(start.get("timeout", 30))))
    except MemoryError as exc:
        line = script_line(exc.__traceback__)
        finish_output()
        error: dict[str, Any] = {"t": protocol.ERROR, "kind": protocol.MEMORY, "message": "memory limit exceeded"}
        if line:
            error["line"] = line
        return error
    except BaseException as exc:  # the script's SystemExit and KeyboardInterrupt too
        finish_output()
        line = script_line(exc.__traceback__)
        where = f"line {line}: " if line else ""
        return {"t": protocol.ERROR, "kind": protocol.RUNTIME, "message": f"{where}{describe(exc, source)}",
                "traceback": "".join(traceback.format_exception(exc))[-4000:]}
    finish_output()
    try:
        text = json.dumps(value, default=_json_default, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        return {"t": protocol.ERROR, "kind": protocol.UNSERIALIZABLE, "message": unserializable(value, exc)}
    limit = int(start.get("max_result_bytes", 1 << 20))
    if len(text) > limit:
        return {"t": protocol.ERROR, "kind": protocol.TOO_LARGE,
                "message": f"{len(text)} bytes (the limit is {limit})"}
    # output was lost when the tail dropped some, or (no tail: a tiny cap) when the head filled up
    truncated = dropped[0] > 0 or (flags["truncated"] and not stage.tail.capacity)
    return {"t": protocol.DONE, "result": text, "truncated": truncated}


def run_limited(start: dict[str, Any]) -> dict[str, Any] | None:
    """Lower this process's memory and CPU limits to the run's (a START's `limits`: a shared
    pool's child entered the sandbox with the pool's ceilings, launchers/pool.py); the ERROR to
    send instead of running the script where they cannot be set (the script never ran)."""
    limits = start.get("limits")
    if not limits:
        return None
    try:
        from .. import sandbox

        sandbox.lower_limits(int(limits["memory_mb"]), int(limits["cpu_seconds"]))
    except Exception as exc:  # noqa: BLE001 - the host reports it as the run's sandbox error
        return {"t": protocol.ERROR, "kind": protocol.SANDBOX, "message": describe(exc)}
    return None


def serve(rfd: int, wfd: int, start: dict[str, Any] | None = None) -> None:
    """Run one script: read its start message (unless given), run it, report, flush."""
    channel = Channel(rfd, wfd, _encode)
    try:
        stage = Stage(channel)
        if start is None:
            start = channel.read_message()
        final = run_limited(start) or run_script(channel, start, stage)
    except ChannelClosed:
        return
    try:
        channel.send(final)
    except OSError:
        pass


def main() -> None:
    """`python -I -m nexus_tool_code_exec.child POLICY_JSON`: the spawn launcher's child. The
    protocol runs on fds 0 and 1, which are then pointed at /dev/null."""
    rfd, wfd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    isolate(json.loads(sys.argv[1]), rfd, wfd)
    serve(rfd, wfd)
    sys.stdout = sys.__stdout__
    sys.stderr = sys.__stderr__
    os._exit(0)
