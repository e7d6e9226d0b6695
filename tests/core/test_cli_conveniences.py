"""What makes the command line pleasant to type at: shell completion of commands and tool names
(cheap, reading no config and starting nothing), `-V`, and `nexus tools` cut to the terminal's
width. Each through the real `nexus` command in a subprocess (completion as the shell asks for
it, the width on a real pseudo-terminal)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from nexus_core import __version__

if TYPE_CHECKING:
    from conftest import FakePlugins, RunNexus

LONG = "Echo the text back " + "and say so at length " * 20

TOOLS = f"""
    from nexus_core import hookimpl, native_tool

    @hookimpl
    def nexus_register_tools(register):
        schema = {{"type": "object", "properties": {{"text": {{"type": "string"}}}}}}
        register(native_tool("echo", {LONG!r} + "\\nSecond line.", schema, lambda a: a.get("text", "")))
        register(native_tool("echo_twice", "Echo it twice.", schema, lambda a: a.get("text", "") * 2))
        register(native_tool("wide", "全角の説明 " * 30, schema, lambda a: "wide"))
"""

#: a plugin whose configure leaves a mark when a config section reached it
MARKER = """
    from pathlib import Path
    from nexus_core import hookimpl

    @hookimpl
    def nexus_configure(config):
        if config.get("mark"):
            Path(config["mark"]).write_text("configured from a config")

    @hookimpl
    def nexus_config_schema():
        return {"type": "object", "properties": {"mark": {"type": "string"}}}
"""


@pytest.fixture
def env(fake_plugins: FakePlugins, tmp_path: Path) -> dict[str, str]:
    """The fake plugins alone (the installed ones blocked, so each `nexus` starts fast), and a
    cache folder of this test's own."""
    fake_plugins.add("fake.tools", TOOLS)
    fake_plugins.add("fake.marker", MARKER)
    environment = fake_plugins.env(NEXUS_BLOCK_PLUGINS=",".join(fake_plugins.others()),
                                   XDG_CACHE_HOME=str(tmp_path / "cache"))
    environment.pop("COLUMNS", None)
    environment.pop("LINES", None)
    return environment


def complete(env: dict[str, str], line: str, shell: str = "bash", cwd: Path | None = None) -> list[str]:
    """What `nexus` answers the shell for the words of `line` (the last one being typed), as
    click's completion scripts ask: `_NEXUS_COMPLETE=<shell>_complete` with COMP_WORDS and
    COMP_CWORD (bash and zsh: the index of the word being typed; fish: that word)."""
    words = line.split(" ")
    cword = words[-1] if shell == "fish" else str(len(words) - 1)
    proc = subprocess.run(
        [sys.executable, "-m", "nexus_core.cli"], capture_output=True, text=True, timeout=60, cwd=cwd, check=False,
        env={**env, "_NEXUS_COMPLETE": f"{shell}_complete", "COMP_WORDS": line, "COMP_CWORD": cword})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # nothing lands in the person's prompt
    if shell == "zsh":  # type, value, help: three lines per item
        lines = proc.stdout.splitlines()
        return [lines[i + 1] for i in range(0, len(lines), 3)]
    return [item.split(",", 1)[1] for item in proc.stdout.splitlines() if item]  # (none: one empty line)


def test_tool_names_complete_for_call_and_tools(env: dict[str, str], tmp_path: Path) -> None:
    assert complete(env, "nexus call ec") == ["echo", "echo_twice"]
    assert complete(env, "nexus call echo_") == ["echo_twice"]
    assert complete(env, "nexus tools w") == ["wide"]
    assert complete(env, "nexus --workspace . call w") == ["wide"]
    assert complete(env, "nexus call echo ") == []  # ARGS_JSON: nothing to offer
    assert complete(env, "nexus to") == ["tools"]  # commands, as click completes them
    assert complete(env, "nexus call ec", shell="zsh") == ["echo", "echo_twice"]
    assert complete(env, "nexus call ec", shell="fish") == ["echo", "echo_twice"]


def test_the_bash_recipe_of_the_docs_completes_tool_names_in_bash(env: dict[str, str], tmp_path: Path) -> None:
    """docs/cli.md's `eval "$(_NEXUS_COMPLETE=bash_source nexus)"` in a real bash, then a Tab
    as bash's completion machinery makes it (COMP_WORDS, COMP_CWORD, the function it registered)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    nexus = bin_dir / "nexus"
    nexus.write_text(f"#!/bin/sh\nexec {sys.executable} -m nexus_core.cli \"$@\"\n")
    nexus.chmod(0o755)
    script = """
        eval "$(_NEXUS_COMPLETE=bash_source nexus)"
        function=$(complete -p nexus | sed -E 's/.*-F ([^ ]+) .*/\\1/')
        COMP_WORDS=(nexus call ec); COMP_CWORD=2
        "$function" nexus ec call   # as bash calls it: the command, the word, the one before
        printf '%s\\n' "${COMPREPLY[@]}"
    """
    proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], capture_output=True, text=True,
                          timeout=120, check=False, env={**env, "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["echo", "echo_twice"], proc.stderr


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_the_zsh_and_fish_recipes_print_their_scripts(env: dict[str, str], shell: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "nexus_core.cli"], capture_output=True, text=True, timeout=60,
                          check=False, env={**env, "_NEXUS_COMPLETE": f"{shell}_source"})
    assert proc.returncode == 0 and proc.stderr == ""
    assert f"_NEXUS_COMPLETE={shell}_complete" in proc.stdout.replace('"', "")


def test_completion_reads_no_config_and_starts_no_server(env: dict[str, str], tmp_path: Path) -> None:
    """A folder's nexus.yaml (and $NEXUS_CONFIG, and --config on the line being typed) may be
    anyone's: a Tab reads none of them. Here one would configure a plugin that leaves a mark,
    and start an MCP server that leaves another; neither happens, and the names are still the
    installed plugins' (the config's plugins.active would have left the tools out)."""
    folder = tmp_path / "cloned"
    folder.mkdir()
    configured, started = tmp_path / "configured", tmp_path / "started"
    config = (f"plugins:\n  active: [fake.marker, nexus.mcp.client]\n  fake.marker: {{mark: {configured}}}\n"
              f"  nexus.mcp.client:\n    servers:\n      evil: {{command: sh, args: [-c, 'touch {started}']}}\n")
    (folder / "nexus.yaml").write_text(config, encoding="utf-8")
    with_mcp = {**env, "NEXUS_BLOCK_PLUGINS": env["NEXUS_BLOCK_PLUGINS"].replace("nexus.mcp.client", ""),
                "NEXUS_CONFIG": str(folder / "nexus.yaml")}
    assert complete(with_mcp, "nexus call ec", cwd=folder) == ["echo", "echo_twice"]
    assert complete(with_mcp, "nexus --config nexus.yaml tools e", cwd=folder) == ["echo", "echo_twice"]
    assert not configured.exists() and not started.exists()
    # the same config, run for real (trusted, as its person would), does both: the test above would have seen them
    proc = subprocess.run([sys.executable, "-m", "nexus_core.cli", "--trust-config", "tools"], capture_output=True, text=True,
                          timeout=120, env=with_mcp, cwd=folder, check=False)
    assert configured.exists(), proc.stderr


def test_the_names_are_cached_per_set_of_installed_plugins(env: dict[str, str], tmp_path: Path) -> None:
    cache = tmp_path / "cache" / "nexus" / "completion.json"
    assert complete(env, "nexus call e") == ["echo", "echo_twice"]
    first = json.loads(cache.read_text())
    assert sorted(first["tools"]) == ["echo", "echo_twice", "wide"]
    # the next Tab reads the file, not the plugins: what it holds is what is offered ...
    cache.write_text(json.dumps({"key": first["key"], "tools": ["echo_cached", "e;rm -rf ~", "e\nx", 3]}))
    assert complete(env, "nexus call e") == ["echo_cached"]  # ... but only names a tool may have
    # other plugins (here: fake.tools blocked), another key: worked out again
    blocked = {**env, "NEXUS_BLOCK_PLUGINS": env["NEXUS_BLOCK_PLUGINS"] + ",fake.tools"}
    assert complete(blocked, "nexus call e") == []
    assert json.loads(cache.read_text())["key"] != first["key"]


def test_dash_V_is_version(run_nexus: RunNexus, env: dict[str, str]) -> None:
    for flag in ("-V", "--version"):
        proc = run_nexus(flag, env=env)
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"nexus (nexus-rt-core) {__version__}\n", "")
    assert run_nexus("--config", "x.yaml", "-V", env=env).stdout == f"nexus (nexus-rt-core) {__version__}\n"


def on_terminal(args: list[str], env: dict[str, str], columns: int) -> str:
    """What `nexus ARGS` prints with its stdout on a pseudo-terminal `columns` wide."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    try:
        proc = subprocess.Popen([sys.executable, "-m", "nexus_core.cli", *args], stdout=slave,
                                stderr=subprocess.PIPE, env=env)
        os.close(slave)
        out = b""
        while True:
            ready, _, _ = select.select([master], [], [], 60)
            assert ready, f"nexus printed nothing for 60 s: {out!r}"
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the terminal's other side is closed
                break
            if not chunk:
                break
            out += chunk
        assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        os.close(master)
    return out.decode().replace("\r\n", "\n")


def display_width(line: str) -> int:
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(c) in ("W", "F") else 1 for c in line)


def test_tools_fits_its_lines_to_the_terminal(env: dict[str, str]) -> None:
    lines = on_terminal(["tools"], env, columns=72).splitlines()
    assert [line.split()[0] for line in lines] == ["echo", "echo_twice", "wide"]
    assert all(display_width(line) <= 72 for line in lines), lines
    assert lines[0].endswith("…") and lines[0].startswith("echo        fake.tools              Echo the text back")
    assert lines[1].endswith("Echo it twice.")  # short enough: whole
    assert lines[2].endswith("…") and display_width(lines[2]) >= 70  # wide characters count twice
    # -l, a pipe: every line whole
    whole = on_terminal(["tools", "-l"], env, columns=72).splitlines()
    assert whole[0].endswith(LONG.strip()) and whole[2].endswith("全角の説明")
    piped = subprocess.run([sys.executable, "-m", "nexus_core.cli", "tools"], capture_output=True, text=True,
                           env={**env, "COLUMNS": "72"}, timeout=60, check=False)
    assert piped.stdout.splitlines() == whole
