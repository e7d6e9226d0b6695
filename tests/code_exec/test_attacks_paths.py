"""Issue 11's attack suite, part 1: what a script can learn about paths it may not open.

Landlock governs opening a path; stat, readlink, access, getxattr and inotify open nothing. A
script reached them with os and ctypes (through sys.modules, past the AST check) and, while the
child kept CAP_DAC_READ_SEARCH, learnt the names of files being made in a 0700 root folder, an
xattr value of a 0600 file and a symlink's secret target, anywhere on the machine. Each attack
here runs in a real run_code script against:

- a 0700 root folder in /tmp holding a 0600 secret, a symlink to a secret target, a file with a
  secret xattr, and a subfolder;
- the same in a 0700 folder below /root (where the runtime of a pyenv install sits too);
- another run's scratch folder, with a file that run wrote, while that run waits in a tool call;
- a folder every user may search, with the same three: what remains (docs/sandbox.md says so).

No secret may appear in anything run_code returns or streams; the host is measured while each
attack runs (responsiveness, CPU, memory), and the range's check runs after every test.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from attack_helpers import Range, report_of
from host_watch import HostWatch

from nexus_tool_code_exec import sandbox

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only"),
              pytest.mark.usefixtures("unharmed")]

#: what every probe of a path does, in the script (os and ctypes reached through sys.modules)
PROBES = '''\
import json, typing

os = typing.sys.modules["os"]
ctypes = typing.sys.modules["ctypes"]
libc = ctypes.CDLL(None, use_errno=True)
HERE = os.getcwd()


def attempt(found, name, fn):
    try:
        found[name] = "OK: " + repr(fn())[:300]
    except OSError as exc:
        found[name] = errno_name(exc.errno)
    except BaseException as exc:
        found[name] = "failed: " + str(exc)


def errno_name(number):
    return typing.sys.modules["errno"].errorcode.get(number, str(number))


def c_call(fn, *args):
    """A libc call: its result, or the errno's name where it failed."""
    res = fn(*args)
    return errno_name(ctypes.get_errno()) if res == -1 else res


def probe(path):
    found = {}
    encoded = path.encode()
    attempt(found, "stat", lambda: os.stat(path).st_size)
    attempt(found, "lstat", lambda: os.lstat(path).st_mode)
    attempt(found, "access", lambda: c_call(libc.access, encoded, 0))
    attempt(found, "readlink", lambda: os.readlink(path))
    attempt(found, "listdir", lambda: os.listdir(path))
    attempt(found, "read", lambda: open(path, "rb").read())
    attempt(found, "o_path_fstat", lambda: os.fstat(os.open(path, os.O_PATH | os.O_NOFOLLOW)).st_size)
    attempt(found, "chdir", lambda: (os.chdir(path), os.chdir(HERE)))
    attempt(found, "getxattr", lambda: os.getxattr(path, "user.secret", follow_symlinks=False))
    attempt(found, "listxattr", lambda: os.listxattr(path, follow_symlinks=False))
    attempt(found, "inotify_init1", lambda: c_call(libc.inotify_init1, 0))
    # the watch itself, on an fd the script has (its cwd): refused before the kernel looks at it
    attempt(found, "inotify_add_watch", lambda: c_call(libc.inotify_add_watch, os.open(".", os.O_RDONLY),
                                                       encoded, 0x100))
    attempt(found, "fanotify_init", lambda: c_call(libc.fanotify_init, 0, 0))
    return found
'''


@attrs.frozen
class Target:
    """A folder with a 0600 secret, a symlink to a secret target and a file with a secret xattr."""

    folder: Path
    secrets: tuple[str, ...]
    xattr_set: bool

    @property
    def file(self) -> str:
        return str(self.folder / "secret.txt")

    @property
    def link(self) -> str:
        return str(self.folder / "dsn")

    @property
    def tagged(self) -> str:
        return str(self.folder / "tagged.txt")


def _target(parent: str, mode: int) -> Target:
    folder = Path(tempfile.mkdtemp(prefix="nexus-paths-", dir=parent))
    content, target, xattr = (f"{kind}-{secrets.token_hex(12)}" for kind in ("content", "dsn", "xattr"))
    (folder / "secret.txt").write_text(content)
    (folder / "secret.txt").chmod(0o600)
    os.symlink(f"postgres://app:{target}@db.internal/prod", folder / "dsn")
    (folder / "tagged.txt").write_text("tagged")
    (folder / "tagged.txt").chmod(0o600)
    try:
        os.setxattr(folder / "tagged.txt", "user.secret", xattr.encode())
        xattr_set = True
    except OSError:  # a file system without user xattrs: the probe still runs, with nothing to find
        xattr_set = False
    (folder / "sub").mkdir()
    folder.chmod(mode)
    return Target(folder, (content, target, xattr), xattr_set)


@pytest.fixture(scope="module")
def locked() -> Iterator[Target]:
    """A 0700 root folder in /tmp (which every user may search)."""
    target = _target("/tmp", 0o700)
    yield target
    shutil.rmtree(target.folder, ignore_errors=True)


@pytest.fixture(scope="module")
def under_root() -> Iterator[Target]:
    """A 0700 root folder below /root, the home that a pyenv runtime lives in."""
    if not os.path.isdir("/root") or not os.access("/root", os.W_OK):
        pytest.skip("no writable /root here")
    target = _target("/root", 0o700)
    yield target
    shutil.rmtree(target.folder, ignore_errors=True)


@pytest.fixture(scope="module")
def searchable() -> Iterator[Target]:
    """A 0755 folder in /tmp: what any user of the machine may search."""
    target = _target("/tmp", 0o755)
    yield target
    shutil.rmtree(target.folder, ignore_errors=True)


def attack(rng: Range, paths: dict[str, str]) -> tuple[dict[str, dict[str, str]], str]:
    """Probe each path from a script, while the host is watched; (what each probe got, the text of
    everything run_code returned or streamed)."""
    script = PROBES + f"\nPATHS = {json.dumps(paths)}\n\n" + (
        "def run(ctx):\n"
        "    print('REPORT ' + json.dumps({name: probe(path) for name, path in PATHS.items()}))\n")
    with HostWatch() as watch:
        result = rng.run(script)
    watch.assert_host_fine(max_gap=1.0, cpu_seconds=5.0, memory_mib=64)
    assert result.error is None, result.error
    return report_of(result), rng.watch.everything_returned()


#: EOPNOTSUPP, as errno.errorcode names it (ENOTSUP, the same number on Linux)
NOTSUP = errno.errorcode[errno.EOPNOTSUPP]


#: what a probe gets on a path the child may not even reach: the mount view hides it (ENOENT), or
#: the folder's mode stops a child without capabilities (EACCES); xattrs are refused before any
#: path is looked at (EOPNOTSUPP), inotify and fanotify too (EPERM)
def unreachable(reached: str) -> dict[str, str]:
    return {"stat": reached, "lstat": reached, "access": f"OK: {reached!r}", "readlink": reached,
            "listdir": reached, "read": reached, "o_path_fstat": reached, "chdir": reached,
            "getxattr": NOTSUP, "listxattr": NOTSUP, "inotify_init1": "OK: 'EPERM'",
            "inotify_add_watch": "OK: 'EPERM'", "fanotify_init": "OK: 'EPERM'"}


def assert_no_secret(text: str, *targets: Target) -> None:
    for target in targets:
        for secret in target.secrets:
            assert secret not in text, f"a secret of {target.folder} reached the script: {secret}"


def test_a_0700_root_folder_leaks_nothing(rng: Range, locked: Target) -> None:
    found, text = attack(rng, {"folder": str(locked.folder), "file": locked.file, "link": locked.link,
                               "tagged": locked.tagged, "sub": str(locked.folder / "sub")})
    assert_no_secret(text, locked)
    # the folder itself is in /tmp: its existence and mode show, as to any user; nothing inside
    assert found["folder"]["stat"].startswith("OK: ") and found["folder"]["listdir"] == "EACCES"
    assert found["folder"]["getxattr"] == found["folder"]["listxattr"] == NOTSUP
    for name in ("file", "link", "tagged", "sub"):
        assert found[name] == unreachable("EACCES"), (name, found[name])


def test_a_folder_below_root_is_not_there_at_all(rng: Range, under_root: Target) -> None:
    """/root is 0700; where the runtime lives below it, the child sees /root as a tmpfs that holds
    only the runtime (sandbox/view.py): everything else is simply not there."""
    paths = {"folder": str(under_root.folder), "file": under_root.file, "link": under_root.link,
             "tagged": under_root.tagged, "bashrc": "/root/.bashrc", "sessions": "/root/.local/state"}
    found, text = attack(rng, paths)
    assert_no_secret(text, under_root)
    # the view covers /root where the runtime is below it; elsewhere /root's mode stops the child
    viewed = "below /root" in sandbox.layer_statuses()["uid"].detail
    for name, got in found.items():
        assert got == unreachable("ENOENT" if viewed else "EACCES"), (name, got)


def test_another_runs_scratch_folder_leaks_nothing(rng: Range) -> None:
    """Run A writes a secret into its scratch folder and waits in a tool call; run B, given A's
    folder (the test tells it: names are random), learns nothing of what is inside."""
    secret = f"scratch-{secrets.token_hex(12)}"
    first: list[Any] = []
    waiting = threading.Thread(target=lambda: first.append(rng.run(
        "import tools\n\n"
        "def run(ctx):\n"
        f"    open('mine.txt', 'w').write({secret!r})\n"
        "    tools.nap(s=20)\n"
        "    return 'done'\n")))
    waiting.start()
    try:
        assert rng.nap.entered.wait(10), "run A never reached its tool call"
        _, scratch = rng.launched[-1]
        found, text = attack(rng, {"folder": scratch, "file": os.path.join(scratch, "mine.txt")})
    finally:
        rng.nap.gate.set()
        waiting.join(30)
    assert first and first[0].output_structured == {"result": "done"}, first
    assert secret not in text
    # the folder's name and owner show (its parent is 0711, so it may be searched, not listed)
    assert found["folder"]["stat"].startswith("OK: ") and found["folder"]["listdir"] == "EACCES"
    assert found["file"] == unreachable("EACCES"), found["file"]


def test_what_remains_in_a_folder_every_user_may_search(rng: Range, searchable: Target) -> None:
    """Pinned on purpose (docs/sandbox.md): in a folder any user of the machine may search, the
    script learns what any of them could: that a path exists, its size, mode, owner and times, and
    where a symlink points. Never a file's content, a listing, an xattr or a watch."""
    found, text = attack(rng, {"folder": str(searchable.folder), "file": searchable.file,
                               "link": searchable.link, "tagged": searchable.tagged})
    content, dsn, xattr = searchable.secrets
    assert found["file"]["stat"] == f"OK: {len(content)}" and found["file"]["read"] == "EACCES"
    assert found["link"]["readlink"] == f"OK: 'postgres://app:{dsn}@db.internal/prod'"
    assert found["folder"]["listdir"] == "EACCES"
    for name in ("folder", "file", "link", "tagged"):
        assert found[name]["getxattr"] == found[name]["listxattr"] == NOTSUP, found[name]
        assert found[name]["inotify_init1"] == found[name]["fanotify_init"] == "OK: 'EPERM'"
    assert content not in text and xattr not in text


def test_the_scripts_own_xattrs_and_watches_are_refused_too(rng: Range) -> None:
    """In its own scratch folder too: xattrs are not supported at all (shutil's copies take that
    as a file system without them, and go on), and no watch can be made."""
    result = rng.run(PROBES + (
        "\ndef run(ctx):\n"
        "    open('own.txt', 'w').write('x')\n"
        "    found = probe('own.txt')\n"
        "    attempt(found, 'setxattr', lambda: os.setxattr('own.txt', 'user.k', b'v'))\n"
        "    shutil = typing.sys.modules['importlib'].import_module('shutil')\n"
        "    attempt(found, 'copy2', lambda: shutil.copy2('own.txt', 'copy.txt'))\n"
        "    return found\n"))
    found = result.output_structured["result"]
    assert found["read"] == "OK: b'x'" and found["stat"] == "OK: 1"
    assert found["getxattr"] == found["listxattr"] == found["setxattr"] == NOTSUP
    assert found["inotify_init1"] == found["inotify_add_watch"] == "OK: 'EPERM'"
    assert found["copy2"] == "OK: 'copy.txt'"
