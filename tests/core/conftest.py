"""Fixtures for the core's tests: fake installed plugins (entry points without pip), the `nexus`
command run as a real subprocess, and a clean environment.

A fake plugin is a folder holding `<dist>-0.1.dist-info/{METADATA,entry_points.txt}` and the
plugin's module. With the folder on sys.path (in-process) or PYTHONPATH (subprocess),
importlib.metadata finds it exactly as it finds a pip-installed distribution.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from nexus_core._plugins import ENTRY_POINT_GROUP, HOOKSPECS_GROUP, installed_entry_points

NEXUS_ENV = ("NEXUS_DISABLE_PLUGIN_AUTOLOAD", "NEXUS_BLOCK_PLUGINS", "NEXUS_TRACE_HOOKS", "NEXUS_CONFIG")


@pytest.fixture(autouse=True)
def _clean_nexus_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own NEXUS_* settings must not change what a test sees."""
    for name in NEXUS_ENV:
        monkeypatch.delenv(name, raising=False)


class FakePlugins:
    """Installs fake distributions, each declaring plugins in the `nexus.plugins` group."""

    def __init__(self, root: Path, tag: str) -> None:
        self.root = root
        self._tag = tag
        self.modules: list[str] = []
        self._count = 0

    def add(self, plugin_id: str, source: str = "", *, target: str | None = None, dist: str | None = None,
            attr: str | None = None, hookspecs: str | None = None, plugin: bool = True) -> str:
        """Install plugin `plugin_id` whose module has `source` (dedented); the entry point names
        the module, or `module:attr` (a class or factory in it). `target` points the entry point
        elsewhere instead (e.g. at a module that does not exist). `hookspecs`: the source of the
        package's own hookspec module, named in `nexus.hookspecs` (`plugin=False`: only that, no
        plugin). Returns the module name, unique to this test so no other test's import is
        reused."""
        self._count += 1
        module = f"fake_nexus_plugin_{self._tag}_{self._count}"
        (self.root / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        self.modules.append(module)
        dist = dist or f"fake-plugin-{self._tag}-{self._count}"
        info = self.root / f"{dist.replace('-', '_')}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n", encoding="utf-8")
        groups = f"[{ENTRY_POINT_GROUP}]\n{plugin_id} = {target or (f'{module}:{attr}' if attr else module)}\n"
        if not plugin:
            groups = ""
        if hookspecs is not None:
            (self.root / f"{module}_hookspecs.py").write_text(textwrap.dedent(hookspecs), encoding="utf-8")
            self.modules.append(f"{module}_hookspecs")
            groups += f"[{HOOKSPECS_GROUP}]\n{plugin_id} = {module}_hookspecs\n"
        (info / "entry_points.txt").write_text(groups, encoding="utf-8")
        importlib.invalidate_caches()  # importlib.metadata caches each folder's listing
        return module

    def others(self) -> list[str]:
        """Plugin ids installed for real (not by this fixture), to block them in tests that
        load every installed plugin."""
        fake = {line.split(" = ")[0] for p in self.root.glob("*.dist-info/entry_points.txt")
                for line in p.read_text().splitlines() if " = " in line}
        return [ep.name for ep in installed_entry_points() if ep.name not in fake]

    def env(self, **extra: str) -> dict[str, str]:
        """An environment for a `nexus` subprocess that sees these fake plugins."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NEXUS_", "PYTHON"))}
        env["PYTHONPATH"] = str(self.root)
        env.update(extra)
        return env


@pytest.fixture
def fake_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[FakePlugins]:
    root = tmp_path / "site"
    root.mkdir()
    tag = f"{abs(hash(request.node.nodeid)):x}"[:10]
    fake = FakePlugins(root, tag)
    monkeypatch.syspath_prepend(str(root))
    yield fake
    for module in fake.modules:
        sys.modules.pop(module, None)
    importlib.invalidate_caches()


RunNexus = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture
def run_nexus(tmp_path: Path) -> RunNexus:
    """`run_nexus(*args, env=None, cwd=None, input=None, trust_config=True)`: the `nexus` command
    as a real subprocess of this interpreter (in `tmp_path` unless `cwd` is given); never raises
    for an exit status. The test wrote the config it runs with, so it is trusted
    (`--trust-config`); the tests of trust itself pass `trust_config=False`."""

    def run(*args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None,
            input: str | None = None, trust_config: bool = True) -> subprocess.CompletedProcess[str]:
        if env is None:
            env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
        return subprocess.run(
            [sys.executable, "-m", "nexus_core.cli", *(["--trust-config"] if trust_config else []), *args],
            capture_output=True, text=True, env=dict(env), cwd=cwd or tmp_path, input=input, timeout=60, check=False,
        )

    return run
