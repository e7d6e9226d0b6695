"""Operations the sandbox refuses read as what they are. Even an operator who widens
`allowed_packages` to os, socket and subprocess widens nothing the OS enforces: the script gets a
clear error naming the refused operation and its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from nexus_core import Nexus
from nexus_core.testing import NexusFactory, assert_error

CE = "nexus.tool.code_exec"
WIDE = ["os", "socket", "subprocess", "json"]


@pytest.fixture
def nx(nexus_factory: NexusFactory) -> Nexus:
    nx = nexus_factory(plugins=[CE], config={"plugins": {CE: {
        "timeout_seconds": 60, "allowed_packages": WIDE, "reject_threads": False}}})
    from nexus_tool_code_exec import engine_for

    active = engine_for(nx).active_layers()
    missing = {"seccomp", "fs"} - set(active)
    if missing:
        pytest.skip(f"layers not active on this machine: {sorted(missing)}")
    return nx


def _error(nx: Nexus, body: str) -> str:
    script = "import os, socket, subprocess\n\ndef run(ctx):\n" + "".join(f"    {line}\n" for line in body.splitlines())
    return assert_error(nx.invoke("run_code", {"script": script})).error or ""


@pytest.mark.parametrize("body", [
    "socket.socket()",
    "s = socket.create_connection(('127.0.0.1', 9))",
    "socket.socketpair()",
])
def test_network_access_is_named(nx: Nexus, body: str) -> None:
    assert _error(nx, body) == "runtime error: line 4: PermissionError: network access is not allowed in run_code"


@pytest.mark.parametrize("body", [
    "os.fork()",
    "subprocess.run(['/bin/true'])",
    "os.execv('/bin/true', ['true'])",
    "os.posix_spawn('/bin/true', ['true'], {})",
])
def test_starting_a_process_is_named(nx: Nexus, body: str) -> None:
    error = _error(nx, body)
    assert error.startswith("runtime error: line 4: ")
    assert error.endswith("starting processes is not allowed in run_code"), error


def test_os_system_cannot_start_its_shell(nx: Nexus) -> None:
    # glibc's system() reports a refused posix_spawn as a shell that exited 127, without raising
    result = nx.invoke("run_code", {"script": "import os\n\ndef run(ctx):\n    return os.system('true')\n"})
    assert result.output_structured == {"result": 127 << 8}, result


def test_signalling_another_process_is_named(nx: Nexus) -> None:
    assert _error(nx, "os.kill(1, 0)") == \
        "runtime error: line 4: PermissionError: signalling other processes is not allowed in run_code"


def test_a_file_outside_the_scratch_folder_is_named(nx: Nexus, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("the host's secret", encoding="utf-8")
    assert _error(nx, f"return open({str(secret)!r}).read()") == \
        f"runtime error: line 4: PermissionError: access to {str(secret)!r} is not allowed in run_code"


def test_the_scratch_folder_is_usable(nx: Nexus) -> None:
    script = ("import os\n\ndef run(ctx):\n    with open('notes.txt', 'w') as f:\n        f.write('kept')\n"
              "    return open('notes.txt').read()\n")
    result = nx.invoke("run_code", {"script": script})
    assert result.output_structured == {"result": "kept"}, result
