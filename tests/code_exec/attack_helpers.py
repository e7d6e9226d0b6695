"""The shooting range for tests/code_exec/test_attacks_*.py: a real Nexus with the real plugins and
every sandbox layer this machine has, plus what a script would love to reach on the host.

A `Range` is built once per test module (`open_range`): before the Nexus starts it puts a random
secret in the host's environment and one in a world-readable file outside any scratch folder,
starts a TCP listener on 127.0.0.1 and a pathname AF_UNIX listener (world-writable, so only the
sandbox keeps a script out), names a file in a world-writable folder and one in /tmp that a
script must not create, and records SIGUSR1/SIGTERM arriving at the test process. File
permissions are on the attacker's side on purpose: whatever stops an attack here is the sandbox.

`Range.check_unharmed` (run after every test by an autouse fixture in each module) then asserts
the host saw none of it: no connection accepted, no file created, no signal delivered, no secret
in anything run_code returned or streamed, the zygote still the same live process, no process,
fd or scratch folder left behind.

Scripts are built as `header(rng) + PAYLOAD + <the technique's own code>`: the technique reaches
something powerful (a module getter, `imp`), and `attack_all(imp)` tries every goal with it and
reports what each attempt got, as a `REPORT {json}` line on stdout.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
from nexus_tool_code_exec.launchers.spares import SPARES
from nexus_tool_code_exec.host.runner import STOP_GRACE
from nexus_tool_code_exec.launchers.zygote import ZygoteLauncher

from nexus_core import Nexus, ToolCall, ToolDef, ToolResult, Veto, hookimpl, native_tool
from nexus_tool_code_exec import CodeExecChunk, engine_for, sandbox

CE = "nexus.tool.code_exec"
#: the wall-clock limit of the range's Nexus: generous, so that no attack's verdict depends on the
#: machine being idle (a script that ends by itself, a thousand tool calls or a C stack blown,
#: ends well within it however busy the CPUs are; with 2 s, both failed on a loaded 2-core machine)
PATIENCE = 60
#: the limit of a run whose verdict is the timeout itself, `rng.run(script, timeout=LIMIT)`: short,
#: so those tests do not wait long for it
LIMIT = 2
#: the kernel's refusals, as Python shows them
EACCES = "PermissionError: [Errno 13] Permission denied"  # Landlock (and DAC)
EPERM = "PermissionError: [Errno 1] Operation not permitted"  # seccomp (and the uid layer)
EBADF = "OSError: [Errno 9] Bad file descriptor"
#: the messages the runtime gives a refused operation that ends the script
NETWORK = "network access is not allowed in run_code"
PROCESS = "starting processes is not allowed in run_code"
SIGNALS = "signalling other processes is not allowed in run_code"


def file_refused(path: str) -> str:
    return f"access to {path!r} is not allowed in run_code"


#: what the end of a run says of a call of the range's `nap` still running: it sleeps through its
#: call's cancel (a tool that cannot be stopped), so the run waits STOP_GRACE for it and says so
NAP_STILL_RUNNING = f"nap (still running after {STOP_GRACE:g}s: it did not stop when asked, its effect may yet happen)"


def stopped_calls(error: str | None, head: str) -> list[str]:
    """`error` is `head` followed by what the run's end said of the inner calls still running
    (`; 2 inner calls were still running and were stopped: nap (...), echo (...)`): those, sorted."""
    assert error is not None and error.startswith(head + "; "), error
    said = re.fullmatch(r"(\d+) inner calls? (?:was|were) still running and (?:was|were) stopped: (.*)",
                        error[len(head) + 2:])
    assert said is not None, error
    calls = re.split(r"(?<=\)), ", said.group(2))
    assert int(said.group(1)) == len(calls), error
    return sorted(calls)


# -- processes, fds, scratch folders --------------------------------------------------------------

from proc_helpers import alive, descendants, open_fds, wait_until  # noqa: E402, F401 - re-exported


def scratch_dirs() -> set[str]:
    """Scratch folders: a spawned child's at the top of /tmp, a zygote's children's below the
    one root folder each zygote has."""
    tmp = Path(tempfile.gettempdir())
    return {str(p) for p in tmp.glob("nexus-run-*")} | {str(p) for p in tmp.glob("nexus-run-*/run-*")}


# -- what the host sees -------------------------------------------------------------------------


class Watch:
    """A gate and an observer on the range's Nexus: every inner call the gates saw, every handler
    that ran, every run_code result and output chunk. Vetoes shell/bash: a script must not get
    the host's shell by calling a tool either (a gate is that policy's place)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.gated: list[ToolCall] = []
        self.invoked: list[ToolCall] = []
        self.results: list[ToolResult] = []
        self.chunks: list[CodeExecChunk] = []

    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Veto | None:
        with self.lock:
            self.gated.append(call)
        if call.name in ("shell", "bash"):
            return Veto("no shell for scripts on the range")
        return None

    @hookimpl
    def nexus_tool_invoke(self, call: ToolCall) -> None:
        with self.lock:
            self.invoked.append(call)

    @hookimpl
    def nexus_tool_result(self, call: ToolCall, result: ToolResult) -> None:
        with self.lock:
            self.results.append(result)

    @hookimpl
    def nexus_code_exec_stdout(self, chunk: CodeExecChunk) -> None:
        with self.lock:
            self.chunks.append(chunk)

    def clear(self) -> None:
        with self.lock:
            self.gated.clear()
            self.invoked.clear()
            self.results.clear()
            self.chunks.clear()

    def everything_returned(self) -> str:
        """All text run_code and the inner tools gave back, and every chunk streamed."""
        with self.lock:
            parts = [json.dumps(attrs.asdict(r), default=str) for r in self.results]
            parts += [c.data for c in self.chunks]
        return "\n".join(parts)


class Nap:
    """A tool that blocks until released (or `s` seconds pass): a slow inner tool call. Each
    test gets a fresh gate; the fixture releases the old one so no host thread stays asleep.
    `returned` is set once a call of this test has come back: run_code answering before it did
    shows it did not wait for the tool."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.returned = threading.Event()

    def __call__(self, arguments: dict[str, Any]) -> str:
        gate, returned = self.gate, self.returned  # this test's, whenever the call comes back
        self.entered.set()
        gate.wait(float(arguments.get("s", 60)))
        returned.set()
        return "woke up"

    def reset(self) -> None:
        self.gate.set()
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.returned = threading.Event()


@attrs.define
class Attack:
    """One attack script's run: its result, and the REPORT it printed ({} if none)."""

    script: str
    result: ToolResult
    found: dict[str, Any]

    def final_line(self) -> int:
        """The script's line marked `# <- final`: the refused operation that ends the run."""
        lines = [n for n, text in enumerate(self.script.splitlines(), 1) if "# <- final" in text]
        assert len(lines) == 1, "mark exactly one line of the script with '# <- final'"
        return lines[0]

    def final_error(self, message: str, exc: str = "PermissionError") -> str:
        return f"runtime error: line {self.final_line()}: {exc}: {message}"


@attrs.define
class Range:
    root: Path
    nx: Nexus
    watch: Watch
    nap: Nap
    secret_path: str
    secret_text: str
    env_name: str
    env_value: str
    tcp: socket.socket
    port: int
    unix: socket.socket
    unix_path: str
    outbox: Path
    outside: str  # a file in a world-writable folder outside scratch
    tmp_target: str  # a file in /tmp itself
    host_pid: int
    signals: list[int]
    zygote_pid: int = 0
    baseline_processes: int = 0
    launched: list[tuple[int, str]] = attrs.field(factory=list)  # (pid, scratch) of each run's child
    spares_seen: set[int] = attrs.field(factory=set)
    preexisting_scratch: set[str] = attrs.field(factory=set)  # before the range's Nexus started

    # -- running scripts ---------------------------------------------------------------------

    def run(self, script: str, timeout: float | None = None) -> ToolResult:
        """run_code with `script`; `timeout` replaces the range's (PATIENCE) for this run only."""
        if timeout is None:
            return self.nx.invoke("run_code", {"script": script})
        engine = engine_for(self.nx)
        patient = engine.settings
        engine.settings = attrs.evolve(patient, timeout_seconds=float(timeout))
        try:
            return self.nx.invoke("run_code", {"script": script})
        finally:
            engine.settings = patient

    def attack(self, technique: str, timeout: float | None = None) -> Attack:
        """Run header + PAYLOAD + `technique` (the script's own code, with `def run(ctx)`)."""
        script = header(self) + PAYLOAD + textwrap.dedent(technique)
        result = self.run(script, timeout=timeout)
        return Attack(script=script, result=result, found=report_of(result))

    # -- the host's state --------------------------------------------------------------------

    def connections(self) -> list[str]:
        got = []
        for sock in (self.tcp, self.unix):
            while True:
                try:
                    conn, addr = sock.accept()
                except (BlockingIOError, InterruptedError):
                    break
                got.append(f"{sock.family.name} connection from {addr!r}")
                conn.close()
        return got

    def snapshot(self) -> dict[str, Any]:
        wait_until(lambda: len(descendants()) <= self.baseline_processes, spares=True)
        self.signals.clear()
        self.watch.clear()
        self.launched.clear()
        self.spares_seen.clear()
        self.note_spares()
        return {"fds": self.settled_fds(), "scratch": scratch_dirs()}

    def settled_fds(self) -> set[str]:
        """host_fds() once it has stopped changing (a spare or a session folder on its way)."""
        last = self.host_fds()
        for _ in range(100):
            time.sleep(0.02)
            now = self.host_fds()
            if now == last:
                return now
            last = now
        return last

    def host_fds(self) -> set[str]:
        """This process's open fds, but those run_code keeps between runs and replaces after
        each: the spare child's pipe ends, the files of the session folder made ahead."""
        held = engine_for(self.nx).held_fds()
        return open_fds() - {str(fd) for fd in held}

    def note_spares(self) -> None:
        self.spares_seen.update(descendants(self.zygote_pid))

    def leaked_scratch(self, before: set[str]) -> list[str]:
        """Scratch folders that appeared since `before` and belong to a child of our zygote
        (handed out or spare) that is gone. Folders of other test processes on this machine
        are not ours to judge, and are told apart by their owner (uid_base + the child's pid)."""
        ours = self.spares_seen | {pid for pid, _ in self.launched}
        live = descendants(self.zygote_pid)
        left = [scratch for _, scratch in self.launched if os.path.exists(scratch)]
        for path in sorted(scratch_dirs() - before - set(left)):
            try:
                pid = os.stat(path).st_uid - sandbox.DEFAULT_UID_BASE
            except OSError:
                continue
            if pid in ours and pid not in live:
                left.append(path)
        return left

    def check_unharmed(self, before: dict[str, Any]) -> None:
        problems = []
        # the host's own state: every goal of every attack, whatever the script reported
        conns = self.connections()
        if conns:
            problems.append(f"the listeners were reached: {conns}")
        if self.signals:
            problems.append(f"signals reached the test process: {self.signals}")
        for path in (self.outside, self.tmp_target):
            if os.path.lexists(path):
                problems.append(f"{path} was created")
        leftovers = sorted(p.name for p in self.outbox.iterdir())
        if leftovers:
            problems.append(f"files appeared in the outbox: {leftovers}")
        if os.environ.get(self.env_name) != self.env_value:
            problems.append("the host's environment was changed")
        text = self.watch.everything_returned()
        for name, secret in (("file", self.secret_text), ("environment", self.env_value)):
            if secret in text:
                problems.append(f"the host's {name} secret is in what run_code returned")
        # the zygote survived, and nothing is left behind
        if not alive(self.zygote_pid) or zygote_of(self.nx).pid != self.zygote_pid:
            problems.append(f"the zygote {self.zygote_pid} is gone")
        if not wait_until(lambda: len(descendants()) <= self.baseline_processes, spares=True):
            problems.append(f"processes left: {sorted(descendants())} (baseline {self.baseline_processes})")
        if not wait_until(lambda: self.host_fds() == before["fds"], spares=True):
            now = self.host_fds()
            problems.append(f"fds leaked: {_described(now - before['fds'])}, closed: {sorted(before['fds'] - now)}")
        if not wait_until(lambda: len(zygote_of(self.nx).held_fds()) == 2 * SPARES, spares=True):
            problems.append(f"the launcher does not hold its {SPARES} spare children: {zygote_of(self.nx).held_fds()}")
        self.note_spares()
        if not wait_until(lambda: not self.leaked_scratch(before["scratch"]), spares=True):
            problems.append(f"scratch folders left: {self.leaked_scratch(before['scratch'])}")

        def spare_folders() -> dict[int, list[str]]:
            """The zygote's live children (the spare, once a run is over) -> the folders each owns."""
            kids = descendants(self.zygote_pid)
            owned: dict[int, list[str]] = {pid: [] for pid in kids}
            for path in scratch_dirs() - self.preexisting_scratch:  # a dead process's, by pid reuse
                try:
                    pid = os.stat(path).st_uid - sandbox.DEFAULT_UID_BASE
                except OSError:
                    continue
                if pid in owned:
                    owned[pid].append(path)
            return owned

        if not wait_until(lambda: [len(f) for f in spare_folders().values()] == [1] * SPARES, spares=True):
            problems.append(f"expected {SPARES} spare children holding one scratch folder each: {spare_folders()}")
        assert not problems, "the host was harmed:\n  " + "\n  ".join(problems)


def _described(fds: set[str]) -> list[str]:
    """Each fd with what it is open on."""
    out = []
    for fd in sorted(fds, key=int):
        try:
            out.append(f"{fd} -> {os.readlink(f'/proc/self/fd/{fd}')}")
        except OSError:
            out.append(fd)
    return out


def _listen(family: int, address: Any) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.bind(address)
    sock.listen(16)
    sock.setblocking(False)
    return sock


@contextmanager
def open_range(root: Path, **code_exec: Any) -> Iterator[Range]:
    """The range, its Nexus warm (the zygote and its spare child up), torn down after."""
    root.chmod(0o755)
    preexisting = scratch_dirs()
    token = secrets.token_hex(12)
    secret_text = f"host-side secret {secrets.token_hex(16)}"
    secret = root / "secret.txt"
    secret.write_text(secret_text)
    secret.chmod(0o644)  # world-readable: only the sandbox keeps it from a script
    outbox = root / "outbox"
    outbox.mkdir()
    outbox.chmod(0o777)  # world-writable: ditto
    unix_path = str(root / "host.sock")
    unix = _listen(socket.AF_UNIX, unix_path)
    os.chmod(unix_path, 0o777)
    tcp = _listen(socket.AF_INET, ("127.0.0.1", 0))
    env_name = "NEXUS_ATTACK_SECRET"
    env_value = f"envsecret{secrets.token_hex(16)}"
    got: list[int] = []
    old_handlers = {sig: signal.signal(sig, lambda signum, frame: got.append(signum))
                    for sig in (signal.SIGUSR1, signal.SIGTERM)}
    os.environ[env_name] = env_value  # before the Nexus (and its zygote) start
    watch, nap = Watch(), Nap()
    workspace = root / "workspace"
    workspace.mkdir()
    settings = {"timeout_seconds": PATIENCE, **code_exec}
    nx = Nexus.from_config(
        {"workspace": str(workspace), "session_dir": str(root / "sessions"), "skills": [],
         "plugins": {"active": [CE, "nexus.tool.file", "nexus.tool.shell"], CE: settings}},
        plugins=[watch],
        tools=[native_tool("nap", "Sleeps until released, or for s seconds.",
                           {"type": "object", "properties": {"s": {"type": "number"}}}, nap),
               native_tool("echo", "Returns its text.",
                           {"type": "object", "properties": {"text": {"type": "string"}},
                            "required": ["text"]}, lambda a: a["text"])],
    )
    rng = Range(root=root, nx=nx, watch=watch, nap=nap, secret_path=str(secret), secret_text=secret_text,
                env_name=env_name, env_value=env_value, tcp=tcp, port=tcp.getsockname()[1], unix=unix,
                unix_path=unix_path, outbox=outbox, outside=str(outbox / "pwned.txt"),
                tmp_target=os.path.join(tempfile.gettempdir(), f"nexus-attack-{token}.txt"),
                host_pid=os.getpid(), signals=got, preexisting_scratch=preexisting)
    try:
        assert failures_free(nx)
        warm = nx.invoke("run_code", {"script": "def run(ctx):\n    return 'warm'\n"})
        assert warm.output_structured == {"result": "warm"}, warm
        launcher = zygote_of(nx)
        assert launcher.pid is not None
        rng.zygote_pid = launcher.pid
        launch = launcher.launch

        def recording_launch() -> Any:
            child = launch()
            rng.launched.append((child.pid, str(child.scratch)))
            return child

        launcher.launch = recording_launch  # type: ignore[method-assign]
        assert wait_until(lambda: len(descendants()) == 1 + SPARES, spares=True), \
            f"expected the zygote and its spares: {descendants()}"
        rng.baseline_processes = len(descendants())
        yield rng
    finally:
        nap.reset()
        nx.close()
        tcp.close()
        unix.close()
        os.environ.pop(env_name, None)
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)
        for path in (rng.tmp_target,):
            if os.path.lexists(path):
                os.unlink(path)


def zygote_of(nx: Nexus) -> ZygoteLauncher:
    engine = engine_for(nx)
    assert engine is not None
    launcher = engine.launcher()
    assert isinstance(launcher, ZygoteLauncher), f"run_code does not use a zygote here: {engine.launcher_note}"
    return launcher


def failures_free(nx: Nexus) -> bool:
    assert not nx.failures, [f"{f.name}: {f.error}" for f in nx.failures]
    return True


# -- the scripts --------------------------------------------------------------------------------


def header(rng: Range) -> str:
    """The constants a script attacks with."""
    return textwrap.dedent(f"""\
        import json

        SECRET = {rng.secret_path!r}
        SECRET_DIR = {os.path.dirname(rng.secret_path)!r}
        PORT = {rng.port}
        UNIX_PATH = {rng.unix_path!r}
        OUTSIDE = {rng.outside!r}
        TMP_TARGET = {rng.tmp_target!r}
        HOST_PID = {rng.host_pid}
        ENV_NAME = {rng.env_name!r}
        SIGUSR1, SIGTERM = {int(signal.SIGUSR1)}, {int(signal.SIGTERM)}

        """)


#: Every goal, tried with a module getter `imp` that a technique reached. Each attempt records
#: what it got ("OK: <value>" or "<Exception>: <message>"); `report()` prints them as one line.
PAYLOAD = textwrap.dedent('''\
    def dunder(name):
        return "_" + "_" + name + "_" + "_"  # past the AST check: built at run time


    def describe(exc):
        return getattr(type(exc), dunder("name")) + ": " + str(exc)


    def subclasses():
        """Every class the interpreter has, from object down: the classic subclass walk."""
        top = getattr(getattr((), dunder("class")), dunder("base"))  # ().__class__.__base__: object
        seen, todo = [], [top]
        while todo:
            cls = todo.pop()
            seen.append(cls)
            try:
                todo.extend(c for c in getattr(cls, dunder("subclasses"))() if c not in seen)
            except TypeError:  # type.__subclasses__ needs an instance of type
                pass
        return seen


    def find_class(name):
        return [c for c in subclasses() if getattr(c, dunder("name")) == name][0]


    def globals_of(fn):
        return getattr(fn, dunder("globals"))


    def attempt(found, name, fn):
        """Record what fn() got: 'OK: <value>' or '<Exception>: <message>'."""
        try:
            value = fn()
        except BaseException as exc:
            found[name] = describe(exc)
        else:
            found[name] = "OK: " + repr(value)[:300]


    def attack_all(imp):
        found = {}

        def attempt_(name, fn):
            attempt(found, name, fn)

        os = imp("os")
        socket = imp("socket")
        subprocess = imp("subprocess")
        ctypes = imp("ctypes")
        bi = imp("builtins")
        libc = ctypes.CDLL(None, use_errno=True)

        def forked():
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            return pid

        def tcp():
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.settimeout(1)
            s.connect(("127.0.0.1", PORT))
            return "connected"

        def unix():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(1)
            s.connect(UNIX_PATH)
            return "connected"

        # files outside the scratch folder
        attempt_("read_secret", lambda: bi.open(SECRET).read())
        attempt_("read_secret_os", lambda: os.read(os.open(SECRET, os.O_RDONLY), 200))
        attempt_("list_secret_dir", lambda: os.listdir(SECRET_DIR))
        attempt_("read_shadow", lambda: bi.open("/etc/shadow").read())
        attempt_("read_host_environ", lambda: bi.open("/proc/%d/environ" % HOST_PID, "rb").read())
        attempt_("write_outside", lambda: bi.open(OUTSIDE, "w").write("pwned"))
        attempt_("write_tmp", lambda: bi.open(TMP_TARGET, "w").write("pwned"))
        # the network
        attempt_("tcp_connect", tcp)
        attempt_("create_connection", lambda: socket.create_connection(("127.0.0.1", PORT), timeout=1))
        attempt_("unix_connect", unix)
        # processes
        attempt_("os_system", lambda: os.system("touch " + OUTSIDE))
        attempt_("subprocess_run", lambda: subprocess.run(["/bin/touch", OUTSIDE]))
        attempt_("fork", forked)
        attempt_("posix_spawn", lambda: os.posix_spawn("/bin/touch", ["touch", OUTSIDE], {}))
        attempt_("execv", lambda: os.execv("/bin/touch", ["touch", OUTSIDE]))
        attempt_("libc_fork", lambda: (libc.fork(), ctypes.get_errno()))
        # the host's environment
        attempt_("environ", lambda: sorted(os.environ))
        attempt_("getenv", lambda: os.getenv(ENV_NAME))
        # signals
        attempt_("kill_host", lambda: os.kill(HOST_PID, SIGUSR1))
        attempt_("kill_host_term", lambda: os.kill(HOST_PID, SIGTERM))
        attempt_("kill_zygote", lambda: os.kill(os.getppid(), SIGUSR1))
        attempt_("kill_zygote_term", lambda: os.kill(os.getppid(), SIGTERM))
        attempt_("killpg_host", lambda: os.killpg(os.getpgid(HOST_PID), SIGUSR1))
        attempt_("kill_everyone", lambda: os.kill(-1, SIGUSR1))
        return found


    def report(found):
        print("REPORT " + json.dumps(found))


    ''')

def expected(rng: Range) -> dict[str, str]:
    """What `attack_all` must get for each goal, exactly, whatever the technique that reached
    `imp`: Landlock's EACCES for files, seccomp's EPERM for sockets, processes and signals."""
    return {
        "read_secret": f"{EACCES}: {rng.secret_path!r}",
        "read_secret_os": f"{EACCES}: {rng.secret_path!r}",
        "list_secret_dir": f"{EACCES}: {os.path.dirname(rng.secret_path)!r}",
        "read_shadow": f"{EACCES}: '/etc/shadow'",
        "read_host_environ": f"{EACCES}: '/proc/{rng.host_pid}/environ'",
        "write_outside": f"{EACCES}: {rng.outside!r}",
        "write_tmp": f"{EACCES}: {rng.tmp_target!r}",
        "tcp_connect": EPERM,
        "create_connection": EPERM,
        "unix_connect": EPERM,
        "os_system": "OK: 32512",  # glibc's system(): the shell could not start, "exit status 127"
        "subprocess_run": EPERM,
        "fork": EPERM,
        "posix_spawn": f"{EPERM}: '/bin/touch'",
        "execv": EPERM,
        "libc_fork": "OK: (-1, 1)",  # -1, errno EPERM
        "environ": "OK: ['HOME', 'LANG', 'TMPDIR', 'TZ']",  # the scrubbed environment, nothing else
        "getenv": "OK: None",
        "kill_host": EPERM,
        "kill_host_term": EPERM,
        "kill_zygote": EPERM,
        "kill_zygote_term": EPERM,
        "killpg_host": EPERM,
        "kill_everyone": EPERM,
    }


def report_of(result: ToolResult) -> dict[str, Any]:
    stdout = (result.output_structured or {}).get("stdout", "")
    for line in stdout.splitlines():
        if line.startswith("REPORT "):
            found: dict[str, Any] = json.loads(line[len("REPORT "):])
            return found
    return {}


def assert_all_refused(rng: Range, found: dict[str, Any], **extra: Any) -> None:
    """Every goal of `attack_all` was attempted and refused exactly as the sandbox refuses it;
    `extra`: the technique's own attempts and what each must have got."""
    assert found, "the script printed no report"
    want = {**expected(rng), **extra}

    def matches(got: Any, text: Any) -> bool:  # a compiled pattern where the text holds a random part
        return bool(text.fullmatch(str(got))) if isinstance(text, re.Pattern) else got == text

    wrong = {name: found.get(name) for name, text in want.items() if not matches(found.get(name), text)}
    assert not wrong, "attempts that did not fail as expected:\n" + "\n".join(
        f"  {name}: got {got!r}, expected {want[name]!r}" for name, got in wrong.items())
