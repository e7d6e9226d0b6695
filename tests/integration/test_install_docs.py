"""Every install command the docs give works, as written, in a fresh virtual environment.

The commands are read from the Markdown (README.md, docs/, each package's and each example's
README), so a new one is covered the day it is written: a `pip install ...` line of a code
block (the lines of one block run in order, in one environment, as a reader types them) or an
inline `` `pip install ...` `` in the text. Nexus is not on PyPI yet, so no page may send a
reader there for a `nexus-rt-*` distribution (the first test, fast); the pages say
`--find-links dist` after `./scripts/build-wheels`, and the slow tests run them so.

How they run, as fast as is honest: `scripts/build-wheels` builds our wheels once per session
(`dist` in a command means them); the third-party dependencies are downloaded once per session
from the package index (pip's cache makes that quick); then each command runs against those
two folders only (`--no-index`), so none of our packages can come from the index, and the
environment is made without pip (`pip --python` installs into it). After each: every installed
`nexus-rt-*` distribution imports, and `nexus plugins` lists each of their plugins active.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import NamedTuple

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted(REPO.glob("nexus_*/README.md")),
         *sorted(REPO.glob("examples/*/README.md"))]

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"`(pip install [^`]+)`")
#: a command a reader types: `pip install` (after a `$ ` prompt or not) with at least one argument
#: (`.venv/bin/pip install -e '.[bench]'` is a contributor's, into the development venv)
TYPED = re.compile(r"(?<![\w/.-])pip install \S")


class Install(NamedTuple):
    where: str  # page:line of its first command
    commands: tuple[str, ...]


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def documented_installs() -> list[Install]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        name = page.relative_to(REPO).as_posix()
        prose = text
        for block in FENCE.finditer(text):
            body = block.group(1).replace("\\\n", " ")
            commands = [m.group(1) for m in re.finditer(r"^(?:\$ )?(pip install \S.*)$", body, re.MULTILINE)]
            if commands:
                first = text.index(commands[0].split()[2], block.start())
                found.append(Install(f"{name}:{_line_of(text, first)}", tuple(commands)))
            # the block blanked out of the prose, its lines kept (for the line numbers)
            prose = prose[:block.start()] + re.sub(r"[^\n]", " ", block.group(0)) + prose[block.end():]
        for span in INLINE.finditer(prose):
            found.append(Install(f"{name}:{_line_of(text, span.start())}", (" ".join(span.group(1).split()),)))
    return found


INSTALLS = documented_installs()


def _arguments(command: str) -> list[str]:
    words = shlex.split(command, comments=True)
    assert words[:2] == ["pip", "install"], command
    return words[2:]


def _targets(arguments: list[str]) -> list[str]:
    """What the command installs: its arguments that are not options or their values."""
    takes_value = {"--find-links", "-f", "--index-url", "-i", "--extra-index-url", "-r", "--requirement", "-c"}
    return [a for i, a in enumerate(arguments)
            if not a.startswith("-") and (i == 0 or arguments[i - 1] not in takes_value)]


def test_the_docs_install_commands_are_all_found_and_none_sends_a_reader_to_pypi_for_nexus() -> None:
    found = sum(len(i.commands) for i in INSTALLS)
    typed = sum(len(TYPED.findall(page.read_text(encoding="utf-8").replace("\\\n", " "))) for page in PAGES)
    assert found == typed, "a `pip install` in the docs that this test does not read: extend documented_installs"
    assert {i.where.split(":")[0] for i in INSTALLS} >= {"README.md", "docs/getting-started.md", "docs/agent.md",
                                                          "docs/mcp.md"}
    for install in INSTALLS:
        for command in install.commands:
            arguments = _arguments(command)
            ours = [t for t in _targets(arguments) if t.startswith("nexus-rt-")]
            assert not ours or "--find-links" in arguments, (
                f"{install.where}: `{command}` would look for {ours} on PyPI, where Nexus is not published yet; "
                "say `pip install --find-links dist ...` after ./scripts/build-wheels (docs/getting-started.md#install)")


# -- running them ---------------------------------------------------------------------------------


def _run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`./scripts/build-wheels` as the docs say, once per session, into a folder of its own."""
    out = tmp_path_factory.mktemp("install-docs") / "dist"
    _run(["bash", str(REPO / "scripts" / "build-wheels"), str(out)], env={**os.environ, "PYTHON": sys.executable},
         timeout=900)
    return out


@pytest.fixture(scope="session")
def dependencies(dist: Path) -> Path:
    """Every third-party wheel the documented installs need, from the package index, once: our
    wheels' dependencies, what the commands name besides ours, and the build backend (a package
    folder is built in an isolated environment)."""
    out = dist.parent / "dependencies"
    wanted = [str(w) for w in sorted(dist.glob("*.whl"))]
    for install in INSTALLS:
        for command in install.commands:
            wanted += [t for t in _targets(_arguments(command))
                       if not t.startswith(("nexus-rt-", ".", "/")) and t not in wanted]
    _run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "-d", str(out),
          *wanted, "hatchling>=1.20", "editables"], timeout=900)
    for ours in out.glob("nexus_rt_*"):  # ours come from dist/ or nowhere
        ours.unlink()
    return out


def _project_name(folder: Path) -> str:
    return str(tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"])


#: run in the new environment: each nexus-rt-* distribution, its import names and its plugins
INSPECT = """
import importlib, json
from importlib.metadata import distributions

found = {}
for dist in distributions():
    name = dist.metadata["Name"]
    # ours, and agent distributions (`nexus init`: examples/acme-agent), which depend on ours
    if not name.startswith("nexus-rt-") and not any(ep.group == "nexus.distributions" for ep in dist.entry_points):
        continue
    plugins = sorted(ep for ep in dist.entry_points if ep.group == "nexus.plugins")
    # a wheel's packages; an editable install has only a .pth, its plugins name the modules
    tops = {f.parts[0] for f in dist.files or () if f.name == "__init__.py" and len(f.parts) == 2}
    tops |= {ep.module.split(".")[0] for ep in plugins}
    for top in sorted(tops):
        importlib.import_module(top)
    found[name] = {"imports": sorted(tops), "plugins": sorted(ep.name for ep in plugins)}
print(json.dumps(found))
"""

#: one run per distinct command sequence (several pages give the same one), named by every place
UNIQUE: dict[tuple[str, ...], list[str]] = {}
for _install in INSTALLS:
    UNIQUE.setdefault(_install.commands, []).append(_install.where)


@pytest.mark.slow
@pytest.mark.parametrize("commands", list(UNIQUE), ids=[" ".join(w) for w in UNIQUE.values()])
def test_a_documented_install_works_in_a_fresh_environment(commands: tuple[str, ...], dist: Path, dependencies: Path,
                                                           tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], timeout=300)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEXUS_", "PYTHON", "PIP_FIND_LINKS"))}
    env.update({"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(dependencies), "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    expected: set[str] = set()
    for command in commands:
        arguments = _arguments(command)
        arguments = [str(dist) if a == "dist" and i and arguments[i - 1] in ("--find-links", "-f") else a
                     for i, a in enumerate(arguments)]
        for target in _targets(arguments):
            if target.startswith(("./", "/")):
                expected.add(_project_name(REPO / target))
            elif target.startswith("nexus-rt-"):
                expected.add(target)
        _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-compile", *arguments],
             cwd=REPO, env=env, timeout=900)

    found = json.loads(_run([str(python), "-c", INSPECT], cwd=tmp_path, env=env, timeout=300).stdout)
    assert expected <= set(found), f"{sorted(expected - set(found))} not installed by {commands}"
    assert all(info["imports"] for info in found.values()), found
    listed = json.loads(_run([str(venv / "bin" / "nexus"), "plugins", "--json"], cwd=tmp_path, env=env,
                             timeout=300).stdout)
    status = {(p["name"], p["distribution"]): p["status"] for p in listed}
    for name, info in found.items():
        for plugin in info["plugins"]:
            assert status.get((plugin, name)) == "active", f"{plugin} of {name}: {listed}"
    assert not [p for p in listed if p["status"] == "failed"], listed
