"""What run_code's three processes say to each other, and how: shared by the host, the zygote and
the child (so it imports nothing but the standard library).

    host  <-- socket pair: zygote messages, fds passed with them -->  zygote
    host  <-- two pipes: run messages -->  child (forked by the zygote, or spawned)

Every message is a JSON object on one line (UTF-8, ending in "\\n") whose "t" names its type;
the types are the constants below, the fields the TypedDicts. One framing serves every channel:
`encoder()` / `write_all()` to send, `LineReader` to split what arrives into messages, and
`PipeReader` to read a pipe whose next message is usually microseconds away.

What the child sends is untrusted: the host reads it through a `LineReader` with a size limit and
then `read_child`, which checks every field once, as the message's contract (its TypedDict's
docstring) says, and turns it into that typed message or a `ProtocolError` that ends the run.
The host is trusted by the zygote and the child; the zygote's messages and the host's requests to
it are read the same way (`read_zygote`, `read_zygote_request`), so that a bug is a clear error.
"""

from __future__ import annotations

import array
import base64
import importlib.util
import json
import json.scanner
import marshal
import os
import select
import socket
import threading
import time
import types
from collections.abc import Callable
from typing import Any, Final, Literal, NotRequired, TypedDict, TypeGuard

#: a decoded message, before its fields are checked
Message = dict[str, Any]

# -- message types ------------------------------------------------------------------------------

# host -> child
START: Final = "start"  # run this script
RESULT: Final = "result"  # the answer to a call
# child -> host
CALL: Final = "call"  # call a tool
OUT: Final = "out"  # output the script wrote
WHERE: Final = "where"  # near its deadline: the script's line that is running now
DONE: Final = "done"  # the end: the script's result
ERROR: Final = "error"  # the end: what went wrong
# zygote -> host
READY: Final = "ready"  # up and running
SPARE: Final = "spare"  # a child forked ahead (its pipe ends passed with the message)
FORKED: Final = "forked"  # the child a FORK asked for (its pipe ends passed with the message)
EXIT: Final = "exit"  # a child the host had killed ended
TRASH: Final = "trash"  # scratch folders scripts changed, renamed out of the way: the host removes them
# host -> zygote
FORK: Final = "fork"  # a child now (no spare at hand)
KILL: Final = "kill"  # kill that child's process group
PRELOAD: Final = "preload"  # compile (not run) these bindings once, for every child forked from now on

#: the kinds of an ERROR message
MEMORY: Final = "memory"  # MemoryError: the address-space limit
RUNTIME: Final = "runtime"  # the script raised
UNSERIALIZABLE: Final = "result"  # run's return value is not JSON
TOO_LARGE: Final = "result_size"  # run's return value is larger than max_result_bytes
SANDBOX: Final = "sandbox"  # the child could not isolate itself; the script never ran
ERROR_KINDS: Final = frozenset((MEMORY, RUNTIME, UNSERIALIZABLE, TOO_LARGE, SANDBOX))

#: the file name the script's code carries (tracebacks and error lines name it)
SCRIPT_FILENAME: Final = "script.py"
#: `nexus_code_exec_stdout` gets the output in chunks that end at a newline or are this many
#: bytes long; the child's sys.stdout sends what is pending at a newline or at this many
#: characters, so the host can emit chunks as they come
OUTPUT_CHUNK: Final = 512


class CompiledCode(TypedDict):
    """The script compiled by the host: marshal data for the bytecode version `magic`."""

    magic: str
    marshal: str


class CallResult(TypedDict, total=False):
    """What the child needs of a ToolResult: only the fields that are set."""

    output: str
    error: str
    error_kind: str | None
    output_file: str
    output_structured: Any


class BindingsPiece(TypedDict):
    """One tool's part of `tools`: the names it defines and its source. The child executes it
    (inside its sandbox) when the script first uses one of those names."""

    tool: str
    function: str  # its function's name in `tools`
    names: list[str]  # every name it defines: its classes and aliases, then its function
    source: str


class BindingsPayload(TypedDict):
    """The `tools` module as the host sends it (in a START, or a PRELOAD to the zygote)."""

    pieces: list[BindingsPiece]
    signatures: dict[str, str]  # tool name -> its function's signature, for error messages


# -- the messages -------------------------------------------------------------------------------
#
# Each message is a TypedDict, and its docstring is its contract (as hookspecs are the hooks'):
# the first line says who sends it to whom and what for; then each field (`name`: what it means);
# then what the receiver does with a bad value. tests/code_exec/test_protocol_contract.py keeps
# this honest: every field is described, and the readers below accept exactly the fields each
# TypedDict declares. The child is untrusted: the host reads each of its messages through
# `read_child`, which checks every field once. The host trusts the zygote and the zygote the
# host; their messages are read through `read_zygote` and `read_zygote_request` all the same, so
# that a bug on either side is a clear error and not a KeyError somewhere later.


class StartMessage(TypedDict):
    """host -> child: run this script (the first message a child reads, and the only START).

    - `call_id`: the run_code call's id, which the script reads as `ctx.call_id`.
    - `script`: the script's source (tracebacks quote it; compiled where `code` is absent).
    - `bindings_key`: which bindings these are (a child that has them compiled is sent none).
    - `skills`: the active skills' helper modules: module name -> [(file name, source), ...].
    - `max_workers`: how many of `parallel`'s callbacks run at once.
    - `max_output_bytes`: the cap on stdout and stderr together, which the child honours.
    - `max_result_bytes`: the cap on the JSON of run's return value.
    - `timeout`: the wall-clock limit in seconds (the child's own timer sends WHERE near it).
    - `bindings`: the `tools` module, left out for a child that has it compiled.
    - `code`: the script as the host compiled it (absent, or of another bytecode version: the
      child compiles `script`).
    - `limits`: the run's memory and CPU limits, which the child lowers its own to before the
      script runs (a shared pool's child entered the sandbox with the pool's ceilings).

    Bad values: the child trusts the host; a bad value is the host's bug, and the run fails with
    the error it causes (a runtime error)."""

    t: Literal["start"]
    call_id: str
    script: str
    bindings_key: str
    skills: dict[str, list[tuple[str, str]]]
    max_workers: int
    max_output_bytes: int
    max_result_bytes: int
    timeout: float
    bindings: NotRequired[BindingsPayload]
    code: NotRequired[CompiledCode]
    limits: NotRequired[ChildLimits]


class ResultMessage(TypedDict):
    """host -> child: the answer to the CALL of the same `id`.

    - `id`: the call's id, as the child sent it.
    - `result`: what the child needs of the ToolResult (only the fields that are set).
    - `spin`: the child runs on CPUs of its own now: it may poll for the answers that follow.

    Bad values: the child trusts the host; an answer to no call it waits for is dropped."""

    t: Literal["result"]
    id: int
    result: CallResult
    spin: NotRequired[bool]


class CallMessage(TypedDict):
    """child -> host: call the tool `name` with `args`; the child waits for the RESULT of its `id`.

    - `id`: the call's number, which its RESULT carries back (a 64-bit integer; the runtime counts
      from 1, and the host only echoes it).
    - `name`: the tool's name, as the script's binding calls it (the host answers only the tools
      bound for this script; any other name is refused as an unknown tool).
    - `args`: the arguments object.
    - `p`: made inside `parallel`: the host may answer it concurrently with others (absent: false).
    - `line`: the script's line that made it (only shown: on the call's `metadata["script_line"]`).
    - `g`: which `parallel` call made it (1, 2, ... in the script; only shown, in calls.jsonl).

    Bad values: a bad `id`, `name`, `args` or `p`, or a field not listed, ends the run with a
    protocol error; `line` and `g` are only shown, so a bad one is left off (and a `line` that
    is not one of the script's is not put on the call)."""

    t: Literal["call"]
    id: int
    name: str
    args: dict[str, Any]
    p: NotRequired[bool]
    line: NotRequired[int]
    g: NotRequired[int]


class OutMessage(TypedDict):
    """child -> host: output the script wrote (a piece of it: the child sends what is pending at
    a newline, or at OUTPUT_CHUNK characters).

    - `s`: the stream, "stdout" or "stderr".
    - `d`: the text.
    - `truncated`: on the message where max_output_bytes cut the output.
    - `held`: on the message that filled the head: the rest is held for the tail.
    - `dropped`: on the first message of the tail: how many bytes were dropped before it.

    Bad values: a message whose `s` names no stream or whose `d` is not text is dropped (counted
    against the run's budget like any other); a bad `truncated`, `held` or `dropped`, or a field
    not listed, ends the run with a protocol error."""

    t: Literal["out"]
    s: Literal["stdout", "stderr"]
    d: str
    truncated: NotRequired[bool]
    held: NotRequired[bool]
    dropped: NotRequired[int]


class WhereMessage(TypedDict):
    """child -> host: near the deadline, the script's line that is running now (for the timeout's
    message).

    - `line`: that line (only shown).

    Bad values: a bad `line` is left off (the message then says nothing); a field not listed
    ends the run with a protocol error."""

    t: Literal["where"]
    line: NotRequired[int]


class DoneMessage(TypedDict):
    """child -> host: the end: the script returned (the child exits next).

    - `result`: run's return value, as JSON text (the host parses it and checks its size).
    - `truncated`: output was lost past max_output_bytes (absent: false).

    Bad values: a `result` that is not text, a bad `truncated`, or a field not listed, ends the
    run with a protocol error; text that is not JSON, or is longer than max_result_bytes, is the
    run's error ("result is not JSON-serializable: ...")."""

    t: Literal["done"]
    result: str
    truncated: NotRequired[bool]


class ErrorMessage(TypedDict):
    """child -> host: the end: what went wrong (the child exits next).

    - `kind`: one of ERROR_KINDS: the address-space limit, the script raised, run's return value
      is not JSON or is too large, the sandbox could not be set up.
    - `message`: what the run's error says after its prefix.
    - `traceback`: the script's traceback (for the run's record).
    - `line`: the script's line that was running (a memory error; only shown).

    Bad values: a `kind` not in ERROR_KINDS, a `message` or `traceback` that is not text, or a
    field not listed, ends the run with a protocol error; a bad `line` is left off."""

    t: Literal["error"]
    kind: str
    message: str
    traceback: NotRequired[str]
    line: NotRequired[int]


class ReadyMessage(TypedDict):
    """zygote -> host: the zygote is up (its first message).

    - `pid`: the zygote's pid.

    Bad values: the host takes the zygote for broken (it did not start)."""

    t: Literal["ready"]
    pid: int


class SpareMessage(TypedDict):
    """zygote -> host: a child forked ahead, isolating itself and then waiting for a script; its
    two pipe ends are passed with the message (the host's read end, then its write end).

    - `pid`: the child's pid (= its process group).
    - `scratch`: its scratch folder.
    - `key`: the bindings it has compiled ("" for none).
    - `idle`: it runs under SCHED_IDLE until the host lifts that.
    - `replaces`: the spare whose run ended, for which this one was forked (null: none).

    Bad values: the host takes the zygote for broken (and starts another when a run needs one)."""

    t: Literal["spare"]
    pid: int
    scratch: str
    key: str
    idle: bool
    replaces: int | None


class ForkedMessage(TypedDict):
    """zygote -> host: the child a FORK asked for; its pipe ends are passed with the message.

    - `req`: the FORK's number.
    - `pid`: the child's pid.
    - `scratch`: its scratch folder.

    Bad values: the host takes the zygote for broken."""

    t: Literal["forked"]
    req: int
    pid: int
    scratch: str


class ExitMessage(TypedDict):
    """zygote -> host: a child the host had killed (KILL) ended.

    - `pid`: the child's pid.
    - `status`: its exit status, as subprocess reports it: negative for a signal.
    - `cpu`: the CPU seconds it used.

    Bad values: the host takes the zygote for broken."""

    t: Literal["exit"]
    pid: int
    status: int
    cpu: float


class TrashMessage(TypedDict):
    """zygote -> host: scratch folders their scripts changed, renamed out of the way as their
    children were reaped: the host removes them.

    - `paths`: the folders (the host removes only those directly below the zygote's scratch root).

    Bad values: the host takes the zygote for broken."""

    t: Literal["trash"]
    paths: list[str]


class ForkMessage(TypedDict):
    """host -> zygote: fork a child now (no spare at hand: more runs at once than spares).

    - `req`: the request's number, which the FORKED answering it carries.

    Bad values: the zygote takes the host for broken: it kills its children and exits."""

    t: Literal["fork"]
    req: int


class KillMessage(TypedDict):
    """host -> zygote: kill that child's process group; its EXIT follows.

    - `pid`: the child's pid (the zygote kills only its own children, not yet reaped).

    Bad values: the zygote takes the host for broken: it kills its children and exits."""

    t: Literal["kill"]
    pid: int


class PreloadMessage(TypedDict):
    """host -> zygote: compile (never run) these bindings once, for every child forked from now on.

    - `key`: which bindings these are (the SPAREs forked since carry it).
    - `bindings`: the `tools` module, compiled by the zygote and executed only by each child,
      inside its sandbox.

    Bad values: the zygote takes the host for broken: it kills its children and exits (bindings
    that do not compile are no bad value: children compile what they use themselves)."""

    t: Literal["preload"]
    key: str
    bindings: BindingsPayload


#: what the host reads from a child, from the zygote, and what the zygote reads from the host
ChildMessage = CallMessage | OutMessage | WhereMessage | DoneMessage | ErrorMessage
ZygoteMessage = ReadyMessage | SpareMessage | ForkedMessage | ExitMessage | TrashMessage
ZygoteRequest = ForkMessage | KillMessage | PreloadMessage


class ChildLimits(TypedDict):
    memory_mb: int
    cpu_seconds: int


class ChildPolicy(TypedDict):
    """How a child isolates itself (the sandbox's layers, limits and read-only paths), as the
    host hands it to the zygote or to a spawned child on the command line."""

    layers: list[str]
    limits: ChildLimits
    read_paths: list[str]
    scratch: NotRequired[str]  # its own scratch folder, added by the launcher
    shared: NotRequired[bool]  # a zygote of the shared pool: its scratch folders are never reused
    net_fd: NotRequired[int | None]  # a network namespace to join, added by the zygote
    parent: NotRequired[int]  # the zygote's pid, added by it before it forks the child


# -- the script's code --------------------------------------------------------------------------


def pack_code(code: types.CodeType) -> CompiledCode:
    """Code compiled by the host (from the tree its check parsed) for the START message."""
    return {"magic": importlib.util.MAGIC_NUMBER.hex(), "marshal": base64.b64encode(marshal.dumps(code)).decode()}


def unpack_code(sent: Any) -> types.CodeType | None:
    """The code of a START message, or None where it is for another bytecode version."""
    if isinstance(sent, dict) and sent.get("magic") == importlib.util.MAGIC_NUMBER.hex():
        code = marshal.loads(base64.b64decode(sent["marshal"]))
        if isinstance(code, types.CodeType):
            return code
    return None


# -- sending ------------------------------------------------------------------------------------


def encoder(default: Callable[[Any], Any] | None = None) -> Callable[[Any], bytes]:
    """A function from a message to its line, built once. `default` turns what JSON has no type
    for into what it has, as json.dumps's does. It calls the json module's C encoder directly:
    `JSONEncoder.encode` builds a new one for every message (half of what encoding a call's
    answer cost). Without the cycle check json.dumps makes (a structure that contains itself
    fails with RecursionError instead of ValueError)."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # an interpreter without the C accelerator
        encode = json.JSONEncoder(separators=(",", ":"), default=default).encode

        def plain(msg: Any) -> bytes:
            return (encode(msg) + "\n").encode()

        return plain

    def no_default(value: Any) -> Any:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")

    chunks = make(None, default or no_default, json.encoder.encode_basestring_ascii, None, ":", ",",
                  False, False, True)
    join = "".join

    def line(msg: Any) -> bytes:
        return (join(chunks(msg, 0)) + "\n").encode()

    return line


#: the encoder of processes that send only JSON types
encode = encoder()


def write_all(fd: int, data: bytes) -> None:
    """All of `data` to `fd`, however many writes that takes (raises OSError as os.write does)."""
    done = os.write(fd, data)
    if done == len(data):
        return
    view = memoryview(data)[done:]
    while view:
        view = view[os.write(fd, view):]


def send_with_fds(sock: socket.socket, msg: Any, fds: list[int] | None = None) -> None:
    """A message over a Unix socket, with `fds` passed alongside (SCM_RIGHTS) if any."""
    data = encode(msg)
    if fds:
        sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sock.sendall(data)


def fd_receiver(sock: socket.socket, passed: list[list[int]], flags: int = 0) -> Callable[[], bytes]:
    """A read function for a `LineReader` on `sock` that keeps the fds passed with the bytes, a
    list per recvmsg, in `passed` in order of arrival. Each message that carries fds was sent
    with one sendmsg, so the n-th such message read owns the n-th list. `flags` go to recvmsg
    (MSG_DONTWAIT: raise BlockingIOError rather than wait)."""

    def read() -> bytes:
        fds = array.array("i")
        data, ancdata, _, _ = sock.recvmsg(1 << 16, socket.CMSG_SPACE(8 * fds.itemsize), flags)
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
                passed.append(list(fds))
        return data

    return read


# -- receiving ----------------------------------------------------------------------------------


#: the scanner json.loads uses underneath (the C one where there is one)
_scan: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def _parse(line: bytes | bytearray) -> Any:
    """One JSON value from a whole line, as json.loads reads it, without json.loads's detours
    for bytes (its encoding detection and wrappers cost as much as the parsing)."""
    text = line.decode("utf-8", "surrogatepass").strip(" \t\n\r")
    value, end = _scan(text, 0)
    if end != len(text):
        raise ValueError("more after the value")
    return value


# -- reading messages: every field checked once -------------------------------------------------


class ProtocolError(Exception):
    """What arrived is not the protocol: the words say what was wrong (never the whole of what
    came: a field's value is shown at most SHOWN_CHARS long)."""


class FramingError(ProtocolError):
    """What arrived is not a message: the words say what it is instead."""


#: the longest piece of a bad value an error shows
SHOWN_CHARS = 40
#: a call's id is a 64-bit integer (the runtime counts from 1; the host only echoes it back)
MIN_CALL_ID, MAX_CALL_ID = -(1 << 63), (1 << 63) - 1


def shown(value: Any) -> str:
    """A value as an error shows it: its repr, cut to SHOWN_CHARS (a child may send megabytes)."""
    if isinstance(value, (dict, list)):
        return f"a JSON {'object' if isinstance(value, dict) else 'array'}"
    text = repr(value[:SHOWN_CHARS + 1] if isinstance(value, str) else value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "..."


def _plain_int(value: Any) -> TypeGuard[int]:
    return type(value) is int  # JSON's true and false are bools, which are ints to Python


def _extra(msg: Message, fields: frozenset[str], what: str) -> None:
    """Refuse a field the message's TypedDict does not declare."""
    if not msg.keys() <= fields:
        unknown = sorted(k for k in msg if k not in fields)
        raise ProtocolError(f"{what} with a field it does not have ({shown(unknown[0])})")


def _shown_line(msg: Message) -> None:
    """`line` is only shown: one that is not a positive integer is left off."""
    if "line" in msg and not (_plain_int(line := msg["line"]) and line > 0):
        del msg["line"]


def _flag(msg: Message, key: str, what: str) -> None:
    if key in msg and type(msg[key]) is not bool:
        raise ProtocolError(f"{what}'s {key!r} must be true or false, not {shown(msg[key])}")


_CALL_FIELDS = frozenset(CallMessage.__annotations__)
_OUT_FIELDS = frozenset(OutMessage.__annotations__)
_WHERE_FIELDS = frozenset(WhereMessage.__annotations__)
_DONE_FIELDS = frozenset(DoneMessage.__annotations__)
_ERROR_FIELDS = frozenset(ErrorMessage.__annotations__)
_STREAMS = frozenset(("stdout", "stderr"))


def _read_call(msg: Message) -> CallMessage:
    # written out (not through the helpers below): one is read per inner call
    rid, name, args = msg.get("id"), msg.get("name"), msg.get("args")
    if (type(rid) is not int or not MIN_CALL_ID <= rid <= MAX_CALL_ID or type(name) is not str
            or type(args) is not dict):
        raise ProtocolError("a call needs an integer id, a tool name and an arguments object")
    if not msg.keys() <= _CALL_FIELDS:
        _extra(msg, _CALL_FIELDS, "a call")
    if "p" in msg and type(msg["p"]) is not bool:
        raise ProtocolError(f"a call's 'p' must be true or false, not {shown(msg['p'])}")
    if "line" in msg and (type(line := msg["line"]) is not int or line <= 0):
        del msg["line"]  # only shown: left off
    if "g" in msg and (type(group := msg["g"]) is not int or group <= 0):
        del msg["g"]
    return msg  # type: ignore[return-value]


def _read_out(msg: Message) -> OutMessage | None:
    if not msg.keys() <= _OUT_FIELDS:
        _extra(msg, _OUT_FIELDS, "output")
    if len(msg) > 3 or "s" not in msg or "d" not in msg:  # a plain piece has t, s and d only
        _flag(msg, "truncated", "output")
        _flag(msg, "held", "output")
        dropped = msg.get("dropped", 0)
        if type(dropped) is not int or dropped < 0:
            raise ProtocolError(f"output's 'dropped' must be a count of bytes, not {shown(dropped)}")
    if msg.get("s") not in _STREAMS or type(msg.get("d")) is not str:
        return None  # no stream of the script's, or no text: nothing to show (the budget counts it)
    return msg  # type: ignore[return-value]


def _read_where(msg: Message) -> WhereMessage:
    _extra(msg, _WHERE_FIELDS, "a 'where'")
    _shown_line(msg)
    return msg  # type: ignore[return-value]


def _read_done(msg: Message) -> DoneMessage:
    _extra(msg, _DONE_FIELDS, "the end")
    if type(msg.get("result")) is not str:
        raise ProtocolError(f"the end's result must be JSON text, not {shown(msg.get('result'))}")
    _flag(msg, "truncated", "the end")
    return msg  # type: ignore[return-value]


def _read_error(msg: Message) -> ErrorMessage:
    _extra(msg, _ERROR_FIELDS, "an error")
    kind = msg.get("kind")
    if type(kind) is not str or kind not in ERROR_KINDS:
        raise ProtocolError(f"an error of an unknown kind {shown(kind)}")
    for key in ("message", "traceback"):
        if (key in msg or key == "message") and type(msg.get(key)) is not str:
            raise ProtocolError(f"an error's {key!r} must be text, not {shown(msg.get(key))}")
    _shown_line(msg)
    return msg  # type: ignore[return-value]


_CHILD_READERS: dict[str, Callable[[Message], ChildMessage | None]] = {
    CALL: _read_call, OUT: _read_out, WHERE: _read_where, DONE: _read_done, ERROR: _read_error,
}


def read_child(msg: Message) -> ChildMessage | None:
    """A child's message (as `LineReader` decoded it) as the message it is, every field checked
    as its TypedDict's contract says; None for one to drop (output of no stream). Raises
    ProtocolError for anything else. The dict is checked in place (a field only shown and bad
    is taken out of it), not copied."""
    kind = msg.get("t")
    reader = _CHILD_READERS.get(kind) if type(kind) is str else None
    if reader is None:
        raise ProtocolError(f"an unknown message type {shown(kind)}")
    return reader(msg)


def _need(msg: Message, what: str, **fields: type | tuple[type, ...]) -> None:
    """Each of `fields` is in `msg` and of its type(s), and nothing else is (but "t")."""
    for key, kinds in fields.items():
        value = msg.get(key, _MISSING)
        if value is _MISSING or not isinstance(value, kinds) or (type(value) is bool and bool not in (
                kinds if isinstance(kinds, tuple) else (kinds,))):
            raise ProtocolError(f"{what}'s {key!r} is {'missing' if value is _MISSING else shown(value)}")
    if len(msg) != len(fields) + 1:
        _extra(msg, frozenset(fields) | {"t"}, what)


_MISSING: Any = object()

#: the zygote's messages and the fields of each (checked by type; the zygote is trusted)
_ZYGOTE_FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    READY: {"pid": int},
    SPARE: {"pid": int, "scratch": str, "key": str, "idle": bool, "replaces": (int, type(None))},
    FORKED: {"req": int, "pid": int, "scratch": str},
    EXIT: {"pid": int, "status": int, "cpu": (int, float)},
    TRASH: {"paths": list},
}
#: the host's requests to the zygote
_REQUEST_FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    FORK: {"req": int},
    KILL: {"pid": int},
    PRELOAD: {"key": str, "bindings": dict},
}


def read_zygote(msg: Message) -> ZygoteMessage:
    """A zygote's message, as the host reads it; ProtocolError for anything else."""
    kind = msg.get("t")
    fields = _ZYGOTE_FIELDS.get(kind) if type(kind) is str else None
    if fields is None:
        raise ProtocolError(f"an unknown message type {shown(kind)} from the zygote")
    _need(msg, f"the zygote's {kind!r}", **fields)
    if kind == TRASH and not all(type(path) is str for path in msg["paths"]):
        raise ProtocolError("the zygote's 'trash' names a folder that is not a path")
    return msg  # type: ignore[return-value]


def read_zygote_request(msg: Message) -> ZygoteRequest:
    """A host's request, as the zygote reads it; ProtocolError for anything else."""
    kind = msg.get("t")
    fields = _REQUEST_FIELDS.get(kind) if type(kind) is str else None
    if fields is None:
        raise ProtocolError(f"an unknown request type {shown(kind)} from the host")
    _need(msg, f"the host's {kind!r}", **fields)
    return msg  # type: ignore[return-value]


def _message(line: bytes | bytearray) -> Message:
    """One line as a message; FramingError for a line that is not a JSON object."""
    try:
        msg = _parse(line)
    except (ValueError, RecursionError, StopIteration):  # deep nesting exhausts the parser
        raise FramingError("a line that is not JSON") from None
    if not isinstance(msg, dict):
        raise FramingError("a message that is not an object")
    return msg


class LineReader:
    """Splits a byte stream into messages, one per line.

    Each byte is searched for a newline once and copied out once: rescanning and re-slicing the
    whole buffer per read or per line made an over-long line (or a burst of small messages)
    quadratic, which let a child keep the host busy for seconds. A pending line longer than
    `max_line` is an error as soon as it is seen, so the buffer never holds much more."""

    def __init__(self, max_line: int) -> None:
        self.max_line = max_line
        self._buf = bytearray()
        self._start = 0  # where the next line begins
        self._scanned = 0  # buf[:scanned] holds no newline past start
        #: the size in bytes of the last message `next` returned
        self.size = 0

    def feed(self, data: bytes) -> None:
        if self._start:
            del self._buf[: self._start]
            self._scanned -= self._start
            self._start = 0
        self._buf += data

    def next(self) -> Message | None:
        """The next message, or None until more bytes are fed. Raises FramingError for a line
        that is not a JSON object, or a line longer than `max_line`."""
        buf = self._buf
        nl = buf.find(b"\n", self._scanned)
        if nl < 0:
            self._scanned = len(buf)
            if len(buf) - self._start > self.max_line:
                raise FramingError("a message longer than the limit")
            return None
        line = buf[self._start:nl]
        self._start = self._scanned = nl + 1
        self.size = len(line)
        return _message(line)

    def take(self, data: bytes) -> Message | None:
        """`feed(data)`, then `next()`. When nothing is pending and `data` is one whole line (a
        message read in one piece, as nearly every one is), it is parsed where it is, not copied
        into the buffer and searched again."""
        if self._start == len(self._buf) and data.find(b"\n") == len(data) - 1 >= 0:
            self.size = len(data) - 1
            return _message(data)  # the newline is stripped as the buffer's path strips it
        self.feed(data)
        return self.next()

    def read(self, source: Callable[[], bytes]) -> Message | None:
        """The next message, reading from `source` (which returns b"" at end of file) until one
        is complete; None at end of file."""
        msg = self.next()
        while msg is None:
            data = source()
            if not data:
                return None
            msg = self.take(data)
        return msg


# -- reading a pipe: spin briefly, then block ---------------------------------------------------
#
# Host and child take turns: the child sends a call and waits, the host answers it and waits for
# the next one. Blocking on every turn makes each a sleep and a wake-up, and a wake-up that
# crosses CPUs costs 40-60 us on the 2-vCPU VMs this was measured on (against ~4 us for a pipe
# round trip when both sides are awake), which was most of an inner call's cost. So a reader that
# expects an answer soon polls the pipe for up to `spin` seconds, and only then blocks in poll().
#
# Spinning pays only while the two sides run on different CPUs: a spinner sharing a CPU with the
# process it waits for takes turns with it and slows it down. So the host decides when its side
# and the child's may spin (host/fastpath.py: only for a run placed on CPUs of its own), and the
# spin does not yield the CPU on each turn (measured: yielding hands the CPU to any runnable task,
# such as a spare being set up under SCHED_IDLE, which then keeps it until the next scheduler
# tick; inner calls took twice as long).
#
# The spinning adapts, in two ways. Its length: a spin lasts FIT_FACTOR times the typical wait it
# saw (a moving average of the waits a spin caught, or a short block would have), between
# `spin / FIT_FACTOR` and `spin`, so that a spin that is going to miss gives up sooner when the
# answers usually come fast. Whether to spin at all: once a spin runs out with nothing to read (a
# slow tool, a script computing between calls), later reads block at once, until a blocking wait
# turns out to have been short enough that a spin would have caught it. `SpinPermits` cap how many
# readers of one process spin at once. Nothing here is a security boundary: a child can only waste its own CPU time by
# spinning, and the host never spins longer than `spin` per read.

#: how long a read polls before it blocks. A no-op inner call's answer takes ~30-60 us to come;
#: the next call of a loop, about as long.
SPIN_SECONDS = 250e-6
#: a spin lasts this many times the typical wait (see above), within [spin / FIT_FACTOR, spin]
FIT_FACTOR = 4.0


class SpinPermits:
    """At most `n` readers spinning at once, process-wide; `n` may be 0 (never spin)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._sem = threading.BoundedSemaphore(n) if n > 0 else None

    def acquire(self) -> bool:
        return self._sem is not None and self._sem.acquire(blocking=False)

    def release(self) -> None:
        if self._sem is not None:
            self._sem.release()


#: how a `PipeReader.read` got its data: there already, caught while spinning, after blocking at
#: once, or after blocking once a spin ran out
Waited = Literal["ready", "spun", "blocked", "spun, then blocked"]


class PipeReader:
    """Reads from `fd` (made non-blocking here), spinning first while that pays."""

    def __init__(self, fd: int, spin: float = SPIN_SECONDS, permits: SpinPermits | None = None,
                 eager: bool = True) -> None:
        os.set_blocking(fd, False)
        self.fd = fd
        self.spin = spin
        self._permits = permits
        self._spin_ok = eager and spin > 0
        self._window: float | None = None  # the next spin's length, when `expect` gave one
        #: the typical wait a spin catches (a moving average); None until one was seen
        self._typical: float | None = None
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)  # POLLHUP and POLLERR are reported anyway
        #: how the last read got its data
        self.waited: Waited = "ready"

    @property
    def fit(self) -> float:
        """How long the next spin lasts (unless `expect` says otherwise): FIT_FACTOR times the
        typical wait, within [spin / FIT_FACTOR, spin]; `spin` until a wait was seen."""
        typical = self._typical
        if typical is None:
            return self.spin
        return min(self.spin, max(self.spin / FIT_FACTOR, FIT_FACTOR * typical))

    def _saw(self, wait: float) -> None:
        typical = self._typical
        self._typical = wait if typical is None else typical + (wait - typical) * 0.25

    def expect(self, window: float | None = None) -> None:
        """Something is coming soon: spin on the next read (for `window` seconds, if given),
        whatever the last waits were like."""
        if self.spin > 0:
            self._spin_ok = True
            self._window = window

    def read(self, size: int = 1 << 16) -> bytes:
        """Up to `size` bytes; b"" at end of file. Raises OSError as os.read does."""
        try:
            data = os.read(self.fd, size)
            self.waited = "ready"
            return data
        except BlockingIOError:
            pass
        window, self._window = self._window, None
        spun = False
        began = time.perf_counter()
        if self._spin_ok and (self._permits is None or self._permits.acquire()):
            spun = True
            try:
                end = began + (window or self.fit)
                while True:
                    try:
                        data = os.read(self.fd, size)
                        self.waited = "spun"
                        self._saw(time.perf_counter() - began)
                        return data
                    except BlockingIOError:
                        pass
                    if time.perf_counter() >= end:
                        break
            finally:
                if self._permits is not None:
                    self._permits.release()
            self._spin_ok = False  # the other side is busy for longer than a spin: stop paying for it
        while True:
            self._poll.poll()  # retried on EINTR (PEP 475)
            try:
                data = os.read(self.fd, size)
                break
            except BlockingIOError:
                continue  # woken without data after all
        if self.spin > 0:
            waited = time.perf_counter() - began
            # a wait a full spin would have caught: spin again, long enough for such a wait
            self._spin_ok = waited < self.spin
            if self._spin_ok:
                self._saw(waited)
        self.waited = "spun, then blocked" if spun else "blocked"
        return data
