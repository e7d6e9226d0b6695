"""Every script starts from the same state, whatever the scripts before it did: no process runs
two scripts (each is a fresh fork of the zygote, which runs none), and the one thing a child
leaves behind that a later one may get, its scratch folder, is given again only as it was made.

A "session" is one Nexus. By default (`pool: process`) the Nexus of a process share one zygote,
which runs no script and holds nothing of any session; with `pool: nexus` each has its own
zygote, scratch root and spares. Either way no two scripts share a process or a folder's path.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from nexus_core.testing import NexusFactory, assert_ok
from nexus_tool_code_exec.launchers.zygote import ZygoteLauncher
from nexus_tool_code_exec.zygote.main import ScratchFolders
from proc_helpers import descendants, wait_until

from nexus_core import Nexus
from nexus_tool_code_exec import engine_for, sandbox

#: what a script may import here: enough to change every kind of process state
ALLOWED = ["builtins", "json", "os", "random", "resource", "signal", "sys", "threading", "time"]


def make(nexus_factory: NexusFactory, pool: str = "process") -> Nexus:
    nx = nexus_factory(plugins=["nexus.tool.code_exec"], config={"plugins": {"nexus.tool.code_exec": {
        "timeout_seconds": 60, "launcher": "zygote", "allowed_packages": ALLOWED, "reject_threads": False,
        "pool": pool}}})
    assert_ok(nx.invoke("run_code", {"script": "def run(ctx):\n    return 1\n"}))  # the zygote is up
    return nx


def run(nx: Nexus, script: str) -> Any:
    result = nx.invoke("run_code", {"script": script})
    assert_ok(result)
    return result.output_structured["result"]


#: what a script sees of the state a script could change
LOOK = """\
import builtins, json, os, random, resource, signal, sys, threading, time

def _never_called():
    global LEFT_GLOBAL  # (so that the name is the script's own: MESS sets it, the others look)
    LEFT_GLOBAL = 0


def _left_global():
    try:
        LEFT_GLOBAL
    except NameError:
        return False
    return True


def _left_builtin():
    return hasattr(builtins, "LEFT_BUILTIN")


def look():
    here = os.getcwd()
    st = os.stat(here)
    try:
        xattrs = os.listxattr(here)
    except OSError as exc:
        xattrs = f"refused: {exc.errno}"
    return {
        "pid": os.getpid(), "ppid": os.getppid(), "folder": here, "inode": st.st_ino, "entries": sorted(os.listdir(here)),
        "mode": oct(st.st_mode & 0o7777), "owner": st.st_uid == os.getuid(), "nlink": st.st_nlink,
        "mtime_not_ahead": st.st_mtime <= time.time() + 1, "xattrs": xattrs,
        "env": dict(os.environ), "umask": os.umask(0o022),
        "rlimit_nofile": resource.getrlimit(resource.RLIMIT_NOFILE),
        "signals_default": [signal.getsignal(s) == signal.SIG_DFL for s in (signal.SIGTERM, signal.SIGUSR1)],
        "threads": threading.active_count(),
        "print_is_builtin": repr(builtins.print) == "<built-in function print>", "len": len([1, 2]),
        "json_loads": json.loads("[1]"), "random_below_1": random.random() < 1, "sys_flag": getattr(sys, "left_by_a_script", None),
        "random_module_marker": getattr(random, "left_by_a_script", None),
        "globals_left": [name for name, left in (("LEFT_GLOBAL", _left_global), ("LEFT_BUILTIN", _left_builtin)) if left()],
        "modules_left": sorted(m for m in sys.modules if m.startswith("left_by_")),
    }
"""

#: a script that changes every kind of state it can, then waits a moment with a thread running
MESS = LOOK + """\
def run(ctx):
    global LEFT_GLOBAL
    before = look()
    with open("note.txt", "w") as f:
        f.write("left for the next script")
    os.mkdir("sub")
    os.chmod(".", 0o777)
    os.utime(".", (0, 0))
    try:
        os.setxattr(".", "user.left", b"1")
    except OSError:
        pass
    os.environ["LEFT_ENV"] = "1"
    os.umask(0o077)
    resource.setrlimit(resource.RLIMIT_NOFILE, (16, 16))
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, lambda *a: None)
    builtins.print = lambda *a, **k: None
    builtins.len = lambda x: 42
    json.loads = lambda *a, **k: "patched"
    random.random = lambda: 4
    sys.left_by_a_script = True
    random.left_by_a_script = True
    sys.modules["left_by_a_script"] = json
    LEFT_GLOBAL = 1
    builtins.LEFT_BUILTIN = 1
    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
    os.chdir("sub")
    return before
"""

CLEAN = LOOK + """\
def run(ctx):
    return look()
"""


def pristine(seen: dict[str, Any]) -> None:
    """What every script must see, whatever ran before it."""
    assert seen["entries"] == [] and seen["mode"] == "0o700" and seen["owner"] and seen["nlink"] == 2, seen
    assert seen["mtime_not_ahead"], seen
    assert seen["xattrs"] == [] or str(seen["xattrs"]).startswith("refused"), seen
    assert set(seen["env"]) == set(sandbox.FIXED_ENV_KEYS) and seen["env"]["HOME"] == seen["folder"], seen["env"]
    assert seen["umask"] == 0o22 and seen["rlimit_nofile"] == [64, 64], seen
    assert seen["signals_default"] == [True, True], seen
    assert seen["threads"] == 1 and seen["print_is_builtin"] and seen["len"] == 2, seen
    assert seen["json_loads"] == [1] and seen["random_below_1"] and seen["sys_flag"] is None and seen["random_module_marker"] is None, seen
    assert seen["globals_left"] == [] and seen["modules_left"] == [], seen


def test_nothing_a_script_changes_reaches_the_next_one(nexus_factory: NexusFactory) -> None:
    nx = make(nexus_factory)
    folders, pids = set(), set()
    for i in range(4):  # each time the next script may get the spare forked after the mess
        seen = run(nx, MESS)
        pristine(seen)
        folders.add(seen["folder"])
        pids.add(seen["pid"])
        after = run(nx, CLEAN)
        pristine(after)
        folders.add(after["folder"])
        pids.add(after["pid"])
    assert len(pids) == 8, "a process ran two scripts"
    assert len(folders) == 8, "a script got a folder by a path an earlier script saw"


def test_an_untouched_folder_is_given_again_only_renamed_and_reset(nexus_factory: NexusFactory) -> None:
    """Scripts of a Nexus's own zygote (one session) that leave their folder alone hand it on:
    the zygote keeps a few folders, not one per run, and a script never sees a path an earlier
    script saw."""
    nx = make(nexus_factory, "nexus")
    launcher = engine_for(nx).launcher()
    assert isinstance(launcher, ZygoteLauncher)
    seen = [run(nx, CLEAN) for _ in range(12)]
    for s in seen:
        pristine(s)
    assert len({s["folder"] for s in seen}) == 12
    assert len({s["inode"] for s in seen}) < 12, "no folder was kept for a later script"
    root = os.path.dirname(seen[0]["folder"])
    assert all(os.path.dirname(s["folder"]) == root for s in seen)
    assert wait_until(lambda: len(os.listdir(root)) <= 6), os.listdir(root)  # spares', in use, and kept
    # every folder a script ran in is gone by that name, once the zygote has reaped its child
    assert wait_until(lambda: not any(os.path.exists(s["folder"]) for s in seen))


def test_the_shared_pool_never_gives_a_folder_again(nexus_factory: NexusFactory, tmp_path: Path) -> None:
    """The shared pool's children are of many sessions: no folder one script had goes to
    another, however untouched; its zygote is started so (`shared`), and removes each one."""
    nx = make(nexus_factory)
    launcher = engine_for(nx).launcher()
    assert isinstance(launcher, ZygoteLauncher) and launcher.policy.get("shared") is True
    seen = [run(nx, CLEAN) for _ in range(6)]
    assert wait_until(lambda: not any(os.path.exists(s["folder"]) for s in seen))
    # the same, in the zygote's own bookkeeping: an untouched folder is removed, not kept
    (tmp_path / "shared").mkdir()
    (tmp_path / "kept").mkdir()
    folders = ScratchFolders(str(tmp_path / "shared"), reuse=False)
    first = folders.take()
    folders.give_back(first)
    assert not os.path.exists(first) and folders.trash == []
    second = folders.take()
    assert second != first and os.listdir(tmp_path / "shared") == [os.path.basename(second)]
    kept = ScratchFolders(str(tmp_path / "kept"), reuse=True)
    one = kept.take()
    kept.give_back(one)
    assert kept.take() != one and len(os.listdir(tmp_path / "kept")) == 1  # given again, renamed


def kept_folders(root: str) -> dict[str, tuple[os.stat_result, list[str] | None]]:
    """Each folder of the scratch root, its stat and (for one of this uid's) its entries, as one
    snapshot: the zygote renames and resets the folders of children that just ended while this
    looks, so a listing whose folder is gone by the time it is looked at is taken again."""
    for _ in range(200):
        try:
            out: dict[str, tuple[os.stat_result, list[str] | None]] = {}
            for name in os.listdir(root):
                path = os.path.join(root, name)
                st = os.stat(path)
                out[name] = (st, os.listdir(path) if st.st_uid == os.geteuid() else None)
            return out
        except FileNotFoundError:
            time.sleep(0.05)
    raise AssertionError(f"the folders of {root} kept changing for 10 s")


def test_a_folder_a_script_changed_is_removed_not_given_again(nexus_factory: NexusFactory) -> None:
    nx = make(nexus_factory)
    changes = {
        "a file": "open('x', 'w').close()",
        "a file, the time set back": "st = os.stat('.'); open('x', 'w').close(); "
                                     "os.utime('.', ns=(st.st_atime_ns, st.st_mtime_ns))",
        "a file made and removed, the time set back": "st = os.stat('.'); open('x', 'w').close(); os.remove('x'); "
                                                      "os.utime('.', ns=(st.st_atime_ns, st.st_mtime_ns))",
        "its mode": "os.chmod('.', 0o750)",
        "its times": "os.utime('.', (0, 0))",
    }
    for what, change in changes.items():
        script = f"import os\n\ndef run(ctx):\n    {change}\n    return os.getcwd()\n"
        folder = run(nx, script)
        root = os.path.dirname(folder)
        assert wait_until(lambda f=folder: not os.path.exists(f)), what  # the zygote reaped its child
        run(nx, CLEAN)  # (the host hears of the folders to remove when it next takes a child)
        assert wait_until(lambda: not any(n.startswith("trash-") for n in os.listdir(root))), what
        for name, (st, entries) in kept_folders(root).items():  # what the zygote keeps: nothing of the change
            assert st.st_mode & 0o7777 == 0o700 and st.st_mtime > 0, (what, name)
            if st.st_uid == os.geteuid():  # a folder kept for later (a spare's is its own uid's)
                assert entries == [], (what, name)
        for _ in range(3):
            pristine(run(nx, CLEAN))


def test_two_nexus_never_share_a_zygote_a_child_or_a_folder_with_pool_nexus(nexus_factory: NexusFactory) -> None:
    """With `pool: nexus`, one Nexus is one session: its own zygote, spares and scratch root."""
    one, two = make(nexus_factory, "nexus"), make(nexus_factory, "nexus")
    launchers = [engine_for(nx).launcher() for nx in (one, two)]
    assert all(isinstance(launcher, ZygoteLauncher) for launcher in launchers)
    assert launchers[0].pid != launchers[1].pid
    seen: dict[int, list[dict[str, Any]]] = {0: [], 1: []}
    for _ in range(5):
        for i, nx in enumerate((one, two)):
            seen[i].append(run(nx, CLEAN))
            seen[i].append(run(nx, MESS))
    roots = [{os.path.dirname(s["folder"]) for s in seen[i]} for i in (0, 1)]
    assert len(roots[0]) == len(roots[1]) == 1 and not roots[0] & roots[1], roots
    pids = [{s["pid"] for s in seen[i]} for i in (0, 1)]
    assert not pids[0] & pids[1]
    for i, launcher in enumerate(launchers):
        assert launcher.pid is not None
        kids = descendants(launcher.pid)
        assert not kids & pids[1 - i], "a zygote forked a child for the other Nexus"
        for s in seen[1 - i]:
            assert s["pid"] not in kids


def test_two_nexus_share_the_process_pool_but_never_a_child_or_a_folder(nexus_factory: NexusFactory) -> None:
    """With `pool: process` (the default), the Nexus of a process share one zygote: each script
    still gets a child of its own, and a folder by a path no other script saw, pristine whatever
    the other Nexus's scripts did to theirs (test_pool.py runs two sessions' scripts at once)."""
    one, two = make(nexus_factory), make(nexus_factory)
    launchers = [engine_for(nx).launcher() for nx in (one, two)]
    assert launchers[0].pid == launchers[1].pid is not None
    seen: dict[int, list[dict[str, Any]]] = {0: [], 1: []}
    for _ in range(5):
        for i, nx in enumerate((one, two)):
            seen[i].append(run(nx, MESS))
            clean = run(nx, CLEAN)
            pristine(clean)
            seen[i].append(clean)
    pids = [{s["pid"] for s in seen[i]} for i in (0, 1)]
    assert len(pids[0]) == len(pids[1]) == 10 and not pids[0] & pids[1], "a process ran two scripts"
    folders = [{s["folder"] for s in seen[i]} for i in (0, 1)]
    assert len(folders[0]) == len(folders[1]) == 10 and not folders[0] & folders[1]
    assert {s["ppid"] for i in (0, 1) for s in seen[i]} == {launchers[0].pid}


@pytest.mark.parametrize("script", [MESS, CLEAN], ids=["mess", "clean"])
def test_every_script_runs_in_a_child_of_the_zygote_not_in_it(nexus_factory: NexusFactory, script: str) -> None:
    nx = make(nexus_factory)
    launcher = engine_for(nx).launcher()
    assert isinstance(launcher, ZygoteLauncher) and launcher.pid is not None
    seen = run(nx, script)
    assert seen["ppid"] == launcher.pid and seen["pid"] != launcher.pid
