"""What run_code's three processes say to each other, and how: shared by the host, the zygote and
the child (so it imports nothing but the standard library).

    host  <-- socket pair: zygote messages, fds passed with them -->  zygote
    host  <-- two pipes: run messages -->  child (forked by the zygote, or spawned)

Every message is a JSON object on one line (UTF-8, ending in "\\n") whose "t" names its type;
the types are the constants below, the fields the TypedDicts. One framing serves every channel:
`encoder()` / `write_all()` to send, `LineReader` to split what arrives into messages, and
`PipeReader` to read a pipe whose next message is usually microseconds away.

What the child sends is untrusted: the host reads it through a `LineReader` with a size limit and
checks every field it uses. The host is trusted by the zygote and the child.
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
from typing import Any, Final, Literal, NotRequired, TypedDict

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


class StartMessage(TypedDict):
    t: Literal["start"]
    call_id: str
    script: str
    bindings_key: str
    skills: dict[str, list[tuple[str, str]]]  # module name -> [(file name, source), ...]
    max_workers: int
    max_output_bytes: int
    max_result_bytes: int
    timeout: float
    bindings: NotRequired[BindingsPayload]  # `tools`, left out for a child that has it compiled
    code: NotRequired[CompiledCode]  # the script as the host compiled it (absent: compile the source)


class ResultMessage(TypedDict):
    t: Literal["result"]
    id: Any  # the call's id, as the child sent it
    result: CallResult
    spin: NotRequired[bool]  # the child runs on CPUs of its own now: it may poll for the answers that follow


class CallMessage(TypedDict):
    t: Literal["call"]
    id: int
    name: str
    args: dict[str, Any]
    p: bool  # made inside parallel: the host may answer it concurrently with others
    line: NotRequired[int]  # the script's line that made it (what the child says: untrusted)


class OutMessage(TypedDict):
    t: Literal["out"]
    s: Literal["stdout", "stderr"]
    d: str
    truncated: NotRequired[bool]  # on the message where max_output_bytes cut the output
    held: NotRequired[bool]  # on the message that filled the head: the rest is held for the tail
    dropped: NotRequired[int]  # on the first message of the tail: the bytes dropped before it


class DoneMessage(TypedDict):
    t: Literal["done"]
    result: str  # run's return value, as JSON text
    truncated: bool


class ErrorMessage(TypedDict):
    t: Literal["error"]
    kind: str  # one of the kinds above
    message: str
    traceback: NotRequired[str]
    line: NotRequired[int]  # the script's line that was running (a memory error)


class WhereMessage(TypedDict):
    t: Literal["where"]
    line: int  # the script's line running when the child's timer fired (near the deadline)


class ReadyMessage(TypedDict):
    t: Literal["ready"]
    pid: int


class SpareMessage(TypedDict):
    t: Literal["spare"]
    pid: int
    scratch: str
    key: str  # the bindings it has compiled ("" for none)
    idle: bool  # it runs under SCHED_IDLE until the host lifts that
    replaces: int | None  # the spare whose run ended, for which this one was forked


class TrashMessage(TypedDict):
    t: Literal["trash"]
    paths: list[str]  # scratch folders their scripts changed, renamed out of the way: the host removes them


class ForkedMessage(TypedDict):
    t: Literal["forked"]
    req: int
    pid: int
    scratch: str


class ExitMessage(TypedDict):
    t: Literal["exit"]
    pid: int
    status: int  # as subprocess reports it: negative for a signal
    cpu: float  # CPU seconds it used


class ForkMessage(TypedDict):
    t: Literal["fork"]
    req: int


class KillMessage(TypedDict):
    t: Literal["kill"]
    pid: int


class PreloadMessage(TypedDict):
    t: Literal["preload"]
    key: str
    bindings: BindingsPayload  # compiled by the zygote, executed only by each child, inside its sandbox


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
    net_fd: NotRequired[int | None]  # a network namespace to join, added by the zygote


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


class FramingError(Exception):
    """What arrived is not a message: the words say what it is instead."""


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
        try:
            msg = _parse(line)
        except (ValueError, RecursionError, StopIteration):  # deep nesting exhausts the parser
            raise FramingError("a line that is not JSON") from None
        if not isinstance(msg, dict):
            raise FramingError("a message that is not an object")
        return msg

    def read(self, source: Callable[[], bytes]) -> Message | None:
        """The next message, reading from `source` (which returns b"" at end of file) until one
        is complete; None at end of file."""
        while True:
            msg = self.next()
            if msg is not None:
                return msg
            data = source()
            if not data:
                return None
            self.feed(data)


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
# The spinning adapts: once a spin runs out with nothing to read (a slow tool, a script computing
# between calls), later reads block at once, until a blocking wait turns out to have been short
# enough that a spin would have caught it. `SpinPermits` cap how many readers of one process spin
# at once. Nothing here is a security boundary: a child can only waste its own CPU time by
# spinning, and the host never spins longer than `spin` per read.

#: how long a read polls before it blocks. A no-op inner call's answer takes ~30-60 us to come;
#: the next call of a loop, about as long.
SPIN_SECONDS = 250e-6


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
        self._window: float | None = None  # the next spin's length, when not `spin`
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)  # POLLHUP and POLLERR are reported anyway
        #: how the last read got its data
        self.waited: Waited = "ready"

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
        window, self._window = self._window or self.spin, None
        spun = False
        if self._spin_ok and (self._permits is None or self._permits.acquire()):
            spun = True
            try:
                end = time.perf_counter() + window
                while True:
                    try:
                        data = os.read(self.fd, size)
                        self.waited = "spun"
                        return data
                    except BlockingIOError:
                        pass
                    if time.perf_counter() >= end:
                        break
            finally:
                if self._permits is not None:
                    self._permits.release()
            self._spin_ok = False  # the other side is busy for longer than a spin: stop paying for it
        began = time.perf_counter()
        while True:
            self._poll.poll()  # retried on EINTR (PEP 475)
            try:
                data = os.read(self.fd, size)
                break
            except BlockingIOError:
                continue  # woken without data after all
        if self.spin > 0:
            self._spin_ok = time.perf_counter() - began < self.spin
        self.waited = "spun, then blocked" if spun else "blocked"
        return data
