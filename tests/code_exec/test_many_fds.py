"""A host with many files open: its zygote's socket may get a number past 1023, which select()
cannot take (FD_SETSIZE). The zygote waits with poll(), so run_code works there too (seen with
some 115 sessions open in one process, each with its zygote's socket and spares' pipes)."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from pathlib import Path

import pytest

from nexus_core import Nexus, native_tool

#: fds the test keeps open, so that the next ones the host opens are past select()'s limit
PAST = 1100


@pytest.fixture
def low_fds_taken() -> Iterator[None]:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < PAST + 200:
        pytest.skip(f"RLIMIT_NOFILE is {soft}: too few fds to take the first {PAST}")
    taken: list[int] = []
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    try:
        while True:
            fd = os.dup(null)
            if fd >= PAST:
                os.close(fd)
                break
            taken.append(fd)
        yield
    finally:
        for fd in taken:
            os.close(fd)
        os.close(null)


def test_run_code_works_in_a_host_whose_free_fds_are_past_1023(low_fds_taken: None, tmp_path: Path) -> None:
    fd = os.open(os.devnull, os.O_RDONLY)
    os.close(fd)
    assert fd >= PAST  # what the host opens from now on: the zygote's socket, the pipes
    config = {"workspace": str(tmp_path), "session_dir": str(tmp_path / "sessions"),
              # a zygote of its own, started now (the process's shared pool may have one already)
              "plugins": {"active": ["nexus.tool.code_exec"], "nexus.tool.code_exec": {"pool": "nexus"}}}
    nx = Nexus.from_config(config)
    try:
        nx.add_tool(native_tool("echo", "echoes x", {"type": "object", "properties": {"x": {"type": "integer"}}},
                                lambda a: str(a["x"])))
        script = "import tools\n\ndef run(ctx):\n    return [tools.echo(x=i).output for i in range(3)]\n"
        for _ in range(3):  # the first child is a spare; the next ones are forked after it
            result = nx.invoke("run_code", {"script": script})
            assert not result.is_error, result.error
            assert (result.output_structured or {}).get("result") == ["0", "1", "2"]
    finally:
        nx.close()
