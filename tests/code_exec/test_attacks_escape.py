"""Issue 6's attack suite, part 1: the known escapes of Python-level sandboxes, through the front
door (`nx.invoke("run_code", ...)` on a Nexus with the real plugins and every sandbox layer this
machine has).

Each test gets past the AST check (dunder names built at run time, traversal through strings and
module attributes), reaches something powerful (os, sys, builtins, `__import__`, ctypes, the
runtime's own globals and frames, the zygote's frames) and then tries every goal with it: read a
secret file outside scratch, connect to listeners on 127.0.0.1 and on a unix socket path, start a
process, write outside scratch, read the host's environment, signal the host and the zygote.
The script reports what each attempt got (asserted exactly), then ends on one refused operation
left uncaught, whose error must name it. After every test the range checks that the host saw
none of it and that nothing (process, fd, scratch folder) was left behind; see attack_helpers.py.

The pipe to the host is attacked in test_attacks_pipe.py, resources in test_attacks_dos.py.
"""

from __future__ import annotations

import os
import platform
import re
import sys
import threading
from pathlib import Path

import pytest
from attack_helpers import (
    EACCES,
    EBADF,
    EPERM,
    LIMIT,
    NETWORK,
    PROCESS,
    SIGNALS,
    Range,
    assert_all_refused,
    file_refused,
    wait_until,
)

from nexus_tool_code_exec.launchers.base import CHILD_ENV

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only"),
              pytest.mark.usefixtures("unharmed")]


def test_the_ast_check_alone_refuses_the_naive_forms(rng: Range) -> None:
    """Not the boundary, but the first line: the plain spellings never run at all."""
    result = rng.run("import os\n\ndef run(ctx):\n    return ().__class__.__base__.__subclasses__()\n")
    assert result.error is not None and result.error.startswith("script rejected: line 1: import of 'os'")
    assert "line 4: dunder attribute '__class__' is not allowed" in result.error
    result = rng.run("def run(ctx):\n    return __import__('os').system('id')\n")
    assert result.error == "script rejected: line 2: '__import__' is not allowed"
    assert rng.watch.chunks == []  # nothing ran: not even the final (empty) output chunk


# -- subclass walks -----------------------------------------------------------------------------


def test_subclass_walk_to_os_wrap_close(rng: Range) -> None:
    """().__class__.__base__.__subclasses__() -> os._wrap_close -> __init__.__globals__: os's
    own namespace, and through its `sys` every module the zygote loaded."""
    attack = rng.attack("""\
        def run(ctx):
            os_globals = globals_of(getattr(find_class("_wrap_close"), dunder("init")))
            sys = os_globals["sys"]
            report(attack_all(lambda name: sys.modules[name]))
            os_globals["fork"]()  # <- final
        """)
    assert_all_refused(rng, attack.found)
    assert attack.result.error == attack.final_error(PROCESS)


def test_subclass_walk_to_subprocess_popen(rng: Range) -> None:
    """subprocess.Popen itself is in the walk (the zygote imported subprocess): call it."""
    attack = rng.attack("""\
        def run(ctx):
            popen = find_class("Popen")
            sub_globals = globals_of(getattr(popen, dunder("init")))
            found = attack_all(lambda name: sub_globals["sys"].modules[name])
            attempt(found, "popen_sh", lambda: popen(["/bin/sh", "-c", "touch " + OUTSIDE]))
            attempt(found, "popen_shell", lambda: popen("touch " + OUTSIDE, shell=True))
            report(found)
            popen(["/bin/touch", OUTSIDE])  # <- final
        """)
    assert_all_refused(rng, attack.found, popen_sh=EPERM, popen_shell=EPERM)
    assert attack.result.error == attack.final_error(PROCESS)


def test_subclass_walk_to_warnings_catch_warnings(rng: Range) -> None:
    """warnings.catch_warnings.__init__.__globals__['sys'], the textbook jail break."""
    attack = rng.attack("""\
        def run(ctx):
            sys = globals_of(getattr(find_class("catch_warnings"), dunder("init")))["sys"]
            report(attack_all(lambda name: sys.modules[name]))
            sys.modules["socket"].create_connection(("127.0.0.1", PORT))  # <- final
        """)
    assert_all_refused(rng, attack.found)
    assert attack.result.error == attack.final_error(NETWORK)


def test_subclass_walk_to_codecs_and_its_builtins(rng: Range) -> None:
    """codecs.StreamReaderWriter's globals hold `builtins`, with the original open and
    __import__ (the script's own builtins are the same ones: nothing to restore)."""
    attack = rng.attack("""\
        def run(ctx):
            codecs_globals = globals_of(getattr(find_class("StreamReaderWriter"), dunder("init")))
            builtins = codecs_globals["builtins"]
            found = attack_all(getattr(builtins, dunder("import")))
            attempt(found, "codecs_open", lambda: codecs_globals["open"](SECRET).read())
            report(found)
            builtins.open(SECRET)  # <- final
        """)
    assert_all_refused(rng, attack.found, codecs_open=f"PermissionError: [Errno 13] Permission denied: "
                                                    f"{rng.secret_path!r}")
    assert attack.result.error == attack.final_error(file_refused(rng.secret_path))


def test_subclass_walk_to_the_io_classes(rng: Range) -> None:
    """_io.FileIO and _io.TextIOWrapper, reached from object: files without open()."""
    eacces = "PermissionError: [Errno 13] Permission denied: "
    attack = rng.attack("""\
        def run(ctx):
            fileio = find_class("FileIO")
            text = find_class("TextIOWrapper")
            found = {}
            attempt(found, "fileio_read", lambda: fileio(SECRET).read())
            attempt(found, "fileio_shadow", lambda: fileio("/etc/shadow").read())
            attempt(found, "fileio_write", lambda: fileio(OUTSIDE, "w").write(b"pwned"))
            attempt(found, "fileio_tmp", lambda: fileio(TMP_TARGET, "x"))
            attempt(found, "textio_read", lambda: text(fileio(SECRET)).read())
            attempt(found, "fileio_scratch", lambda: fileio("mine.txt", "w").write(b"scratch is fine"))
            report(found)
            fileio(SECRET)  # <- final
        """)
    assert attack.found == {
        "fileio_read": f"{eacces}{rng.secret_path!r}",
        "fileio_shadow": f"{eacces}'/etc/shadow'",
        "fileio_write": f"{eacces}{rng.outside!r}",
        "fileio_tmp": f"{eacces}{rng.tmp_target!r}",
        "textio_read": f"{eacces}{rng.secret_path!r}",
        "fileio_scratch": "OK: 15",
    }
    assert attack.result.error == attack.final_error(file_refused(rng.secret_path))


# -- frame and traceback walks ------------------------------------------------------------------


def test_generator_frame_walk_to_the_runtime_and_its_channel(rng: Range) -> None:
    """gi_frame, f_back, f_globals and f_builtins are not dunders: the AST check lets them all
    through. From run's caller (the runtime's run_script) the script has the runtime's globals,
    the host pipe's Channel, the original __import__ and open; it uses the channel to call
    run_code itself and a tool that does not exist. The host refuses both, unseen by any handler."""
    attack = rng.attack("""\
        def run(ctx):
            def peek():
                yield walker.gi_frame.f_back  # the frame that resumed us: run's
            walker = peek()
            runtime = next(walker).f_back
            rt = runtime.f_globals
            found = attack_all(runtime.f_builtins[dunder("import")])
            found["runtime_frame"] = runtime.f_code.co_name
            channel = rt["_channel"]
            found["channel_fds"] = [channel.rfd, channel.wfd]
            for name in ("run_code", "no_such_tool"):
                reply = channel.request({"t": "call", "name": name,
                                         "args": {"script": "def run(ctx):\\n    return 1\\n"}})
                found["forged_" + name] = reply["result"]["error"]
            start = runtime.f_locals["start"]
            found["start_keys"] = sorted(start)
            report(found)
            runtime.f_builtins["open"](SECRET)  # <- final
        """)
    assert_all_refused(rng, attack.found, forged_run_code="unknown tool: 'run_code'",
                       forged_no_such_tool="unknown tool: 'no_such_tool'")
    assert attack.found["runtime_frame"] == "run_script"
    # the start message holds the script's own things, nothing of the host's (the bindings'
    # source is left out when the child has them compiled already; "spin" is there when the
    # run is placed on CPUs of its own; "code" when the child did not compile the script itself;
    # "limits" are the run's own memory and CPU limits, which the child lowers its own to)
    assert sorted(set(attack.found["start_keys"]) - {"bindings", "spin", "code"}) == [
        "bindings_key", "call_id", "limits", "max_output_bytes", "max_result_bytes", "max_workers", "script",
        "skills", "t", "timeout"]
    inner = [c for c in rng.watch.gated + rng.watch.invoked if c.parent_call_id is not None]
    assert inner == [], "a forged call reached the gates or a handler"
    assert attack.result.error == attack.final_error(file_refused(rng.secret_path))


def test_traceback_frame_walk_to_the_runtime_globals(rng: Range) -> None:
    """An exception's __traceback__.tb_frame.f_back.f_globals: the runtime module's namespace,
    with the os and sys it imported."""
    attack = rng.attack("""\
        def run(ctx):
            try:
                1 / 0
            except ZeroDivisionError as exc:
                tb = getattr(exc, dunder("traceback"))
            rt = tb.tb_frame.f_back.f_globals
            os, sys = rt["os"], rt["sys"]
            found = attack_all(lambda name: sys.modules[name])
            found["runtime"] = rt[dunder("name")]
            report(found)
            os.kill(os.getppid(), SIGTERM)  # <- final
        """)
    assert_all_refused(rng, attack.found, runtime="nexus_tool_code_exec.child.runtime")
    assert attack.result.error == attack.final_error(SIGNALS)


def test_sys_getframe_walk_up_into_the_zygote(rng: Range) -> None:
    """With sys reached, sys._getframe() walks past the runtime into the zygote's own frames
    (the child is a fork of it): the `Zygote` object (its control socket to the host, its send,
    its fork_child, the pids of its other children) and the host's ends of this child's pipes.
    Every fd there was closed before the script ran, every pid belongs to another uid, /tmp is
    not writable."""
    attack = rng.attack("""\
        def run(ctx):
            sys = json.codecs.sys
            os = sys.modules["os"]
            frames, frame = {}, sys._getframe()
            while frame is not None:
                frames.setdefault(frame.f_code.co_name, frame.f_locals)
                frame = frame.f_back
            zygote, forking = frames["serve_host"]["self"], frames["fork_child"]
            found = attack_all(lambda name: sys.modules[name])
            found["frames"] = sorted(frames)
            kill = ('{"t": "kill", "pid": %d}' % os.getppid()).encode() + b"\\n"
            attempt(found, "ctrl_sendall", lambda: zygote.ctrl.sendall(kill))
            attempt(found, "ctrl_fd_write", lambda: os.write(zygote.ctrl.fileno(), kill))
            attempt(found, "zygote_send", lambda: zygote.send({"t": "ready", "pid": HOST_PID}))
            attempt(found, "host_pipe_write", lambda: os.write(forking["to_child_w"], b"x"))
            attempt(found, "host_pipe_read", lambda: os.read(forking["from_child_r"], 10))
            attempt(found, "fork_child", lambda: zygote.fork_child())
            siblings = sorted(set(zygote.children) - {os.getpid()})
            for pid in siblings:
                attempt(found, "kill_sibling", lambda: os.kill(pid, 9))
            if not siblings:
                found["kill_sibling"] = "no sibling"
            report(found)
            os.kill(os.getppid(), 9)  # <- final
        """)
    assert_all_refused(rng, attack.found, ctrl_sendall=EBADF, ctrl_fd_write=EBADF, zygote_send=EBADF,
                       host_pipe_write=EBADF, host_pipe_read=EBADF,
                       # its mkdtemp targets the zygote's scratch root, outside this child's own folder
                       fork_child=re.compile(re.escape(EACCES) + r": '/tmp/nexus-run-\w+/run-\w+'"),
                       kill_sibling=EPERM)
    assert {"run", "run_script", "serve", "_child_after_fork", "fork_child", "serve_host", "zygote_main"} <= set(
        attack.found["frames"])
    assert attack.result.error == attack.final_error(SIGNALS)


# -- module attribute chains --------------------------------------------------------------------

#: allowed module -> ... -> a module getter, with no dunder in sight (or one built at run time)
CHAINS = {
    "json.codecs.sys": "lambda name: json.codecs.sys.modules[name]",
    "json.decoder.re.enum.sys": "lambda name: json.decoder.re.enum.sys.modules[name]",
    "re._parser builtins": "getattr(re._parser.parse, dunder('builtins'))[dunder('import')]",
    "re._compiler builtins": "getattr(re._compiler.compile, dunder('builtins'))[dunder('import')]",
    "collections._sys": "lambda name: collections._sys.modules[name]",
    "collections.abc globals": "lambda name: globals_of(collections.abc.Mapping.get)['sys'].modules[name]",
    "typing.sys": "lambda name: typing.sys.modules[name]",
    "random._os": "lambda name: random._os.sys.modules[name]",
    "fnmatch.os": "lambda name: fnmatch.os.sys.modules[name]",
    "datetime.sys": "lambda name: datetime.sys.modules[name]",
    "statistics.sys": "lambda name: statistics.sys.modules[name]",
    "dataclasses.inspect.importlib": "dataclasses.inspect.importlib.import_module",
    "string._re.enum.sys": "lambda name: string._re.enum.sys.modules[name]",
    "tools.attrs builtins": "getattr(tools.attrs.define, dunder('builtins'))[dunder('import')]",
    "tools._call globals": "lambda name: globals_of(tools._call)['sys'].modules[name]",
}


@pytest.mark.parametrize("chain", list(CHAINS), ids=list(CHAINS))
def test_module_attribute_chain(rng: Range, chain: str) -> None:
    """Allowed modules import os and sys themselves, and keep them as attributes."""
    attack = rng.attack(f"""\
        import collections, collections.abc, dataclasses, datetime, fnmatch, random, re, statistics
        import string, tools, typing

        def run(ctx):
            imp = {CHAINS[chain]}
            report(attack_all(imp))
            imp("posix").fork()  # <- final
        """)
    assert_all_refused(rng, attack.found)
    assert attack.result.error == attack.final_error(PROCESS)


# -- getattr, operator.attrgetter, format strings, dunder names built at run time -----------------


def test_attrgetter_walk_with_dunders_in_strings(rng: Range) -> None:
    """operator.attrgetter takes dotted names as a string: the AST check never sees them."""
    attack = rng.attack("""\
        import operator

        def run(ctx):
            classes = operator.attrgetter("__class__.__base__.__subclasses__")(())()
            wrap_close = [c for c in classes if operator.attrgetter("__name__")(c) == "_wrap_close"][0]
            sys = operator.attrgetter("__init__.__globals__")(wrap_close)["sys"]
            report(attack_all(lambda name: sys.modules[name]))
            sys.modules["socket"].socket()  # <- final
        """)
    assert_all_refused(rng, attack.found)
    assert attack.result.error == attack.final_error(NETWORK)


def test_string_formatter_get_field_traversal(rng: Range) -> None:
    """string.Formatter().get_field walks a format field ('0.__init__.__globals__[sys]') and
    hands back the object itself, not its text."""
    attack = rng.attack("""\
        import string

        def run(ctx):
            field = string.Formatter().get_field
            top = field("0.__class__.__base__", [()], {})[0]
            wrap_close = [c for c in field("0.__subclasses__", [top], {})[0]()
                          if field("0.__name__", [c], {})[0] == "_wrap_close"][0]
            sys = field("0.__init__.__globals__[sys]", [wrap_close], {})[0]
            report(attack_all(lambda name: sys.modules[name]))
            sys.modules["os"].kill(HOST_PID, SIGUSR1)  # <- final
        """)
    assert_all_refused(rng, attack.found)
    assert attack.result.error == attack.final_error(SIGNALS)


def test_format_string_reads_only_the_scrubbed_environment(rng: Range) -> None:
    """str.format traverses attributes and keys too, but gives text: the most it reads of the
    environment is the child's own, scrubbed one."""
    attack = rng.attack("""\
        def run(ctx):
            wrap_close = find_class("_wrap_close")
            found = {
                "sys": "{0.__init__.__globals__[sys]}".format(wrap_close),
                "environ": "{0.__init__.__globals__[environ]}".format(wrap_close),
                "secret": "{0.__init__.__globals__[environ]}".format(wrap_close).count(ENV_NAME),
            }
            report(found)
            return "{0.__init__.__globals__[environ][HOME]}".format(wrap_close)
        """)
    assert attack.found["sys"] == "<module 'sys' (built-in)>"
    assert attack.found["environ"].startswith("environ({") and attack.found["secret"] == 0
    for key in ("'HOME'", "'LANG': 'C.UTF-8'", "'TMPDIR'", "'TZ': 'UTC0'"):
        assert key in attack.found["environ"]
    assert attack.result.output_structured["result"].startswith("/tmp/nexus-run-")


#: ways to spell "__self__" that the AST check cannot see
DUNDER_SPELLINGS = {
    "concatenation": '"__se" + "lf__"',
    "chr": 'chr(95) * 2 + "self" + chr(95) * 2',
    "join": '"_".join(["", "", "self", "", ""])',
    "reversed": '"".join(reversed("__fles__"))',
    "bytes": 'bytes([95, 95, 115, 101, 108, 102, 95, 95]).decode()',
    "base64": 'base64.b64decode("X19zZWxmX18=").decode()',
    "percent": '"%sself%s" % ("__", "__")',
    "replace": '"XXselfXX".replace("X", "_")',
}


@pytest.mark.parametrize("spelling", list(DUNDER_SPELLINGS), ids=list(DUNDER_SPELLINGS))
def test_dunder_names_built_at_run_time(rng: Range, spelling: str) -> None:
    """print.__self__ is the builtins module; however the name is spelled, getattr gets it."""
    attack = rng.attack(f"""\
        import base64

        def run(ctx):
            builtins = getattr(print, {DUNDER_SPELLINGS[spelling]})
            report(attack_all(getattr(builtins, dunder("import"))))
            builtins.open(OUTSIDE, "w")  # <- final
        """)
    assert_all_refused(rng, attack.found)
    assert attack.result.error == attack.final_error(file_refused(rng.outside))


def test_print_self_is_the_builtins_module(rng: Range) -> None:
    attack = rng.attack("""\
        def run(ctx):
            builtins = getattr(print, "__se" + "lf__")
            found = attack_all(getattr(builtins, "__imp" + "ort__"))
            found["builtins"] = getattr(builtins, dunder("name"))
            attempt(found, "exec", lambda: getattr(builtins, "ex" + "ec")("import os; os.fork()"))
            attempt(found, "eval", lambda: getattr(builtins, "ev" + "al")("__import__('os').getpid() > 0"))
            report(found)
            getattr(builtins, "ex" + "ec")("import socket; socket.socket()")  # <- final
        """)
    assert_all_refused(rng, attack.found, builtins="builtins", exec=EPERM, eval="OK: True")
    assert attack.result.error == attack.final_error(NETWORK)


# -- ctypes and posix, reached indirectly -------------------------------------------------------



@pytest.mark.skipif(platform.machine() != "x86_64", reason="raw x86_64 syscall numbers and machine code")
def test_ctypes_raw_syscalls_and_machine_code(rng: Range) -> None:
    """ctypes from sys.modules (the zygote imported it): libc's syscall() with raw numbers,
    bypassing every Python wrapper, and then machine code making the syscall itself, from a
    fresh RWX mapping and from a heap page mprotect()ed executable. The kernel's filter sees the syscall, not who made it: -1 and EPERM, every time
    (clone3 ENOSYS, so glibc falls back to clone, whose flags the filter can read)."""
    attack = rng.attack("""\
        import typing

        def run(ctx):
            ctypes = typing.sys.modules["ctypes"]
            libc = ctypes.CDLL(None, use_errno=True)
            libc.syscall.restype = ctypes.c_long
            SYSCALLS = {  # x86_64 numbers: (nr, args)
                "fork": (57, ()),
                "vfork": (58, ()),
                "clone_process": (56, (17, 0, 0, 0, 0)),  # SIGCHLD: a new process, not a thread
                "clone_newuser": (56, (0x10000000 | 0x00010000 | 0x00000800 | 0x00000100, 0, 0, 0, 0)),
                "socket_inet": (41, (2, 1, 0)),
                "socket_unix": (41, (1, 1, 0)),
                "execve": (59, (b"/bin/sh", 0, 0)),
                "kill_host": (62, (HOST_PID, SIGUSR1)),
                "tgkill_host": (234, (HOST_PID, HOST_PID, SIGUSR1)),
                "ptrace_attach": (101, (16, HOST_PID, 0, 0)),
                "pidfd_open_host": (434, (HOST_PID, 0)),
                "pidfd_send_signal": (424, (0, SIGUSR1, 0, 0)),
                "unshare_user": (272, (0x10000000,)),
                "setns": (308, (0, 0)),
                "mount": (165, (b"none", b"/tmp", b"tmpfs", 0, 0)),
                "bpf": (321, (0, 0, 0)),
                "io_uring_setup": (425, (8, 0)),
                "userfaultfd": (323, (0,)),
                "open_by_handle_at": (304, (0, 0, 0)),
                "keyctl": (250, (0, 0, 0)),
                "prlimit_host": (302, (HOST_PID, 7, 0, 0)),
                "sched_setaffinity_host": (203, (HOST_PID, 8, 0)),
                "setpriority_host": (141, (0, HOST_PID, 19)),
                "fcntl_setown": (72, (0, 8, HOST_PID)),
                "ioctl_tiocsti": (16, (0, 0x5412, b"x")),
                "clone3": (435, (0, 0)),
            }
            found = {}
            for name, (nr, args) in SYSCALLS.items():
                ctypes.set_errno(0)
                found[name] = [libc.syscall(nr, *args), ctypes.get_errno()]
            libc.mmap.restype = ctypes.c_void_p
            libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                  ctypes.c_long]
            page = libc.mmap(None, 4096, 7, 0x22, -1, 0)  # PROT_READ|WRITE|EXEC, MAP_PRIVATE|ANONYMOUS
            shellcode = {
                "raw_fork": b"\\xb8\\x39\\x00\\x00\\x00\\x0f\\x05\\xc3",  # mov eax, 57; syscall; ret
                "raw_socket": b"\\xb8\\x29\\x00\\x00\\x00\\xbf\\x02\\x00\\x00\\x00\\xbe\\x01\\x00\\x00\\x00"
                              b"\\x31\\xd2\\x0f\\x05\\xc3",  # socket(AF_INET, SOCK_STREAM, 0)
            }
            for name, code in shellcode.items():
                ctypes.memmove(page, code, len(code))
                found[name] = ctypes.CFUNCTYPE(ctypes.c_long)(page)()
            # or mprotect a page of ordinary heap memory executable, and run the code there
            heap = ctypes.create_string_buffer(3 * 4096)
            spot = (ctypes.addressof(heap) + 4095) & ~4095
            ctypes.memmove(spot, shellcode["raw_fork"], len(shellcode["raw_fork"]))
            libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            found["mprotect_rwx"] = libc.mprotect(spot, 4096, 7)
            found["heap_fork"] = ctypes.CFUNCTYPE(ctypes.c_long)(spot)()
            libc.mprotect(spot, 4096, 3)
            report(found)
            typing.sys.modules["os"].fork()  # <- final
        """)
    refused: int | list[int] = [-1, 1]
    want = {name: refused for name in (
        "fork", "vfork", "clone_process", "clone_newuser", "socket_inet", "socket_unix", "execve", "kill_host",
        "tgkill_host", "ptrace_attach", "pidfd_open_host", "pidfd_send_signal", "unshare_user", "setns", "mount",
        "bpf", "io_uring_setup", "userfaultfd", "open_by_handle_at", "keyctl", "prlimit_host",
        "sched_setaffinity_host", "setpriority_host", "fcntl_setown", "ioctl_tiocsti")}
    want["clone3"] = [-1, 38]  # ENOSYS
    want["raw_fork"] = want["raw_socket"] = want["heap_fork"] = -1  # -EPERM straight from the kernel
    want["mprotect_rwx"] = 0  # allowed, and no help
    assert attack.found == want
    assert attack.result.error == attack.final_error(PROCESS)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86 machine code")
def test_a_32_bit_syscall_kills_the_process(rng: Range) -> None:
    """int 0x80 uses the i386 numbers, which a filter written for x86_64 would misread: the
    filter checks the architecture first and kills the process. The host says so; the zygote and
    the next script are unaffected."""
    attack = rng.attack("""\
        import typing

        def run(ctx):
            ctypes = typing.sys.modules["ctypes"]
            libc = ctypes.CDLL(None)
            libc.mmap.restype = ctypes.c_void_p
            libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                  ctypes.c_long]
            page = libc.mmap(None, 4096, 7, 0x22, -1, 0)
            code = b"\\xb8\\x02\\x00\\x00\\x00\\xcd\\x80\\xc3"  # mov eax, 2 (i386 fork); int 0x80; ret
            ctypes.memmove(page, code, len(code))
            print("about to fork the 32-bit way")
            return ctypes.CFUNCTYPE(ctypes.c_long)(page)()
        """)
    assert attack.result.error == "runtime error: the script's process was killed by SIGSYS"
    assert attack.result.output_structured == {"stdout": "about to fork the 32-bit way\n"}
    result = rng.run("def run(ctx):\n    return 'next'\n")
    assert result.output_structured == {"result": "next"}


def test_posix_module_reached_through_sys_modules(rng: Range) -> None:
    """posix is what os wraps: the same syscalls, the same refusals."""
    attack = rng.attack("""\
        import typing

        def run(ctx):
            posix = typing.sys.modules["posix"]
            found = attack_all(lambda name: typing.sys.modules[name])
            attempt(found, "posix_fork", posix.fork)
            attempt(found, "posix_kill", lambda: posix.kill(HOST_PID, SIGUSR1))
            attempt(found, "posix_environ", lambda: sorted(posix.environ))
            attempt(found, "posix_open", lambda: posix.open(SECRET, posix.O_RDONLY))
            attempt(found, "posix_mkdir", lambda: posix.mkdir(OUTSIDE))
            attempt(found, "posix_symlink", lambda: posix.symlink(SECRET, OUTSIDE))
            attempt(found, "posix_link_in", lambda: posix.link(SECRET, "stolen.txt"))
            report(found)
            posix.system("touch " + OUTSIDE)
            posix.execv("/bin/sh", ["sh", "-c", "touch " + OUTSIDE])  # <- final
        """)
    eacces = "PermissionError: [Errno 13] Permission denied: "
    # a hard link to the secret inside scratch: refused by fs.protected_hardlinks (the child does
    # not own the file) or else by Landlock (EXDEV: a link may not cross out of its hierarchy), or
    # on the way there (EACCES: a child without capabilities may not search pytest's 0700 folder)
    link_in = attack.found.pop("posix_link_in")
    assert link_in in (f"{EPERM}: {rng.secret_path!r} -> 'stolen.txt'",
                       f"OSError: [Errno 18] Invalid cross-device link: {rng.secret_path!r} -> 'stolen.txt'",
                       f"{eacces}{rng.secret_path!r} -> 'stolen.txt'")
    assert_all_refused(rng, attack.found, posix_fork=EPERM, posix_kill=EPERM,
                       posix_environ="OK: [b'HOME', b'LANG', b'TMPDIR', b'TZ']",
                       posix_open=f"{eacces}{rng.secret_path!r}", posix_mkdir=f"{eacces}{rng.outside!r}",
                       posix_symlink=f"{eacces}{rng.secret_path!r} -> {rng.outside!r}")
    assert attack.result.error == attack.final_error(PROCESS)


def test_ctypes_through_the_builtins_of_a_reached_function(rng: Range) -> None:
    """Any function's __builtins__ is the builtins dict: __import__('ctypes') from json.loads."""
    attack = rng.attack("""\
        def run(ctx):
            imp = getattr(json.loads, dunder("builtins"))[dunder("import")]
            ctypes = imp("ctypes")
            libc = ctypes.CDLL(None, use_errno=True)
            found = attack_all(imp)
            found["libc_kill_host"] = [libc.kill(HOST_PID, SIGUSR1), ctypes.get_errno()]
            found["libc_kill_zygote"] = [libc.kill(imp("os").getppid(), SIGTERM), ctypes.get_errno()]
            found["libc_socket"] = [libc.socket(2, 1, 0), ctypes.get_errno()]
            found["libc_system"] = libc.system(("touch " + OUTSIDE).encode())
            report(found)
            imp("os").killpg(imp("os").getpgid(HOST_PID), SIGUSR1)  # <- final
        """)
    assert_all_refused(rng, attack.found, libc_kill_host=[-1, 1], libc_kill_zygote=[-1, 1],
                       libc_socket=[-1, 1], libc_system=127 << 8)
    assert attack.result.error == attack.final_error(SIGNALS)


def test_joining_the_zygotes_process_group_escapes_neither_kill_nor_signals(rng: Range) -> None:
    """setpgid is not filtered: the child can move into the zygote's process group (same
    session). kill(0, sig) then aims at that group, and the timeout's group kill no longer finds
    the child under its own pgid. Neither helps: the signal reaches nobody but the child itself
    (uid and Landlock scoping keep the zygote out; SIGUSR1 would kill it), and the runner kills
    the pid too."""
    attack = rng.attack("""\
        import typing

        def run(ctx):
            os, signal = typing.sys.modules["os"], typing.sys.modules["signal"]
            signal.signal(SIGUSR1, signal.SIG_IGN)  # kill(0) includes the sender
            found = {}
            attempt(found, "setpgid", lambda: os.setpgid(0, os.getppid()))
            found["pgrp_is_zygotes"] = os.getpgrp() == os.getppid()
            attempt(found, "kill_group", lambda: os.kill(0, SIGUSR1))
            attempt(found, "killpg_zygote", lambda: os.killpg(os.getppid(), SIGUSR1))
            attempt(found, "setsid", os.setsid)
            report(found)
            while True:
                pass
        """, timeout=LIMIT)
    assert attack.found == {
        "setpgid": "OK: None",
        "pgrp_is_zygotes": True,
        "kill_group": "OK: None",  # delivered to itself (ignored), refused for the zygote
        "killpg_zygote": EPERM,  # seccomp: only pid 0 or its own
        # no longer a group leader, it may start a session (and a group) of its own: no terminal
        # to gain (Landlock refuses /dev/tty*), and the timeout finds it by its own pgid again
        "setsid": "OK: None",
    }
    assert attack.result.error == f"script timed out after {LIMIT}s"  # and its process is gone: `unharmed`


def test_the_host_environment_is_nowhere_in_the_zygote(rng: Range) -> None:
    """What a script could dig out of its own memory with ctypes is what the zygote had when it
    forked it (plus the start message). The zygote was started with a fixed small environment:
    its environ is exactly that, and neither secret is anywhere in its memory (scanned here,
    from the host, through /proc/<pid>/mem)."""
    environ = Path(f"/proc/{rng.zygote_pid}/environ").read_bytes().split(b"\0")
    assert sorted(e.split(b"=", 1)[0].decode() for e in environ if e) == sorted(CHILD_ENV)
    secrets = [rng.env_value.encode(), rng.secret_text.encode()]
    found, scanned = memory_holds(rng.zygote_pid, secrets)
    assert found == [] and scanned > 16 << 20, found  # the interpreter, its heap, the modules were read
    # the scan itself works: this process has the environment secret in its memory
    assert memory_holds(os.getpid(), secrets[:1])[0] == secrets[:1]


def memory_holds(pid: int, needles: list[bytes]) -> tuple[list[bytes], int]:
    """Which of `needles` are somewhere in process `pid`'s readable memory, and how much was read."""
    found: set[bytes] = set()
    scanned = 0
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            start, end = (int(x, 16) for x in span.split("-"))
            if not perms.startswith("r") or line.rstrip().endswith(("[vvar]", "[vsyscall]")):
                continue
            try:
                mem.seek(start)
                data = mem.read(end - start)
            except (OSError, OverflowError, ValueError):
                continue
            scanned += len(data)
            found.update(n for n in needles if n in data)
    return [n for n in needles if n in found], scanned


def test_a_run_cannot_reach_another_run_running_beside_it(rng: Range) -> None:
    """Two scripts at once. The first keeps a private note in its scratch folder and sleeps; the
    second is told (by the test) exactly where that folder is and what the first one's pid is,
    and goes for both. Each child has its own uid and its own Landlock domain."""
    first: dict[str, object] = {}
    script = ("import time\n\ndef run(ctx):\n    open('note.txt', 'w').write('first run, private')\n"
              "    time.sleep(1.2)\n    return open('note.txt').read()\n")
    runner = threading.Thread(target=lambda: first.update(result=rng.run(script)))
    runner.start()
    try:
        assert wait_until(lambda: bool(rng.launched) and os.path.exists(os.path.join(rng.launched[0][1], "note.txt")))
        pid, scratch = rng.launched[0]
        attack = rng.attack(f"""\
            import typing

            def run(ctx):
                os, ctypes = typing.sys.modules["os"], typing.sys.modules["ctypes"]
                libc = ctypes.CDLL(None, use_errno=True)
                note = {os.path.join(scratch, "note.txt")!r}
                found = {{}}
                attempt(found, "read_note", lambda: open(note).read())
                attempt(found, "list_folder", lambda: os.listdir({scratch!r}))
                attempt(found, "overwrite_note", lambda: open(note, "w").write("defaced"))
                attempt(found, "drop_file", lambda: open({scratch!r} + "/dropped.txt", "w"))
                attempt(found, "kill_it", lambda: os.kill({pid}, 9))
                attempt(found, "pidfd_it", lambda: os.pidfd_open({pid}))
                found["ptrace_it"] = [libc.ptrace(16, {pid}, 0, 0), ctypes.get_errno()]
                report(found)
                os.kill({pid}, 19)  # <- final
            """)
    finally:
        runner.join()
    note = os.path.join(scratch, "note.txt")
    eacces = "PermissionError: [Errno 13] Permission denied: "
    assert attack.found == {
        "read_note": f"{eacces}{note!r}",
        "list_folder": f"{eacces}{scratch!r}",
        "overwrite_note": f"{eacces}{note!r}",
        "drop_file": f"{eacces}{scratch + '/dropped.txt'!r}",
        "kill_it": EPERM,
        "pidfd_it": EPERM,
        "ptrace_it": [-1, 1],
    }
    assert attack.result.error == attack.final_error(SIGNALS)
    assert first["result"].output_structured == {"result": "first run, private"}  # type: ignore[attr-defined]


# -- leaving the runtime: SystemExit, KeyboardInterrupt, os._exit ---------------------------------

#: script body -> the error run_code must give
EXITS = {
    "raise SystemExit(3)": "runtime error: line 4: SystemExit: 3",
    "raise SystemExit": "runtime error: line 4: SystemExit",
    "raise KeyboardInterrupt('^C')": "runtime error: line 4: KeyboardInterrupt: ^C",
    "raise GeneratorExit": "runtime error: line 4: GeneratorExit",
    "typing.sys.exit('bye')": "runtime error: line 4: SystemExit: bye",
    "exit(5)": "runtime error: line 4: SystemExit: 5",
    "parallel.map([1, 2], lambda x: typing.sys.exit('from a callback'))":
        "runtime error: line 4: SystemExit: from a callback",
    "typing.sys.modules['_thread'].interrupt_main()": "runtime error: line 4: KeyboardInterrupt",
    "random._os._exit(7)": "runtime error: the script's process exited with status 7 before it finished",
    "random._os._exit(0)": "runtime error: the script's process exited with status 0 before it finished",
    "random._os.abort()": "runtime error: the script's process was killed by SIGABRT",
    "random._os.kill(random._os.getpid(), 9)": "runtime error: the script's process was killed by SIGKILL",
    "random._os.kill(0, 15)": "runtime error: the script's process was killed by SIGTERM",
}


@pytest.mark.parametrize("body", list(EXITS), ids=list(EXITS))
def test_leaving_the_runtime_is_a_clear_error_and_the_next_script_runs(rng: Range, body: str) -> None:
    """The script raises what `except Exception` does not catch, or ends its own process (os
    reached through random): the run ends at once with a clear error, what it printed is kept,
    and the zygote forks the next script as usual."""
    result = rng.run(f"import parallel, random, typing\n\ndef run(ctx):\n"
                              f"    print('leaving'); {body}\n    return 'not reached'\n")
    assert result.error == EXITS[body]
    assert (result.output_structured or {}).get("stdout") == "leaving\n"
    result = rng.run("def run(ctx):\n    return 'next'\n")
    assert result.output_structured == {"result": "next"}


def test_the_same_nexus_still_runs_an_ordinary_script_after_the_attacks(rng: Range) -> None:
    """Last in the module: the zygote that forked every attack above is the one that runs this."""
    result = rng.run("import json, tools\n\ndef run(ctx):\n    print('still here')\n"
                        "    return {'echo': tools.echo(text='hi').output, 'n': json.loads('[1, 2]')}\n")
    assert result.output_structured == {"stdout": "still here\n", "result": {"echo": "hi", "n": [1, 2]}}
