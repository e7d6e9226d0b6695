"""Shared fixtures: building wheels of this repo's packages and fresh virtual environments, for
tests that prove a package installs and works on its own (as a user would pip install it); and a
fake of the LLM providers' APIs for tests that drive their SDKs (`fake_providers`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fakes.providers import FakeProviders

# pytester (tests/core/test_testing_plugin.py tests the nexus_core.testing plugin with it). pytest
# accepts `pytest_plugins` only in a conftest it loads before collecting, which
# tests/core/conftest.py is not when the whole suite runs.
pytest_plugins = ["pytester"]

# A suite started in the background of a non-interactive shell (`scripts/stress ... &`, nohup) inherits
# SIGINT ignored, and so would every `nexus` the tests start: the Ctrl-C tests then wait for a process
# that cannot hear them. A signal ignored stays ignored across exec, one with a handler goes back to its
# default, so giving SIGINT Python's own handler here gives the tests' processes the default a
# terminal user has.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REPO = Path(__file__).resolve().parents[1]
PACKAGES = {
    "nexus-rt-core": REPO / "nexus_core",
    "nexus-rt-tool-shell": REPO / "nexus_tool_shell",
    "nexus-rt-tool-file": REPO / "nexus_tool_file",
    "nexus-rt-tool-code-exec": REPO / "nexus_tool_code_exec",
    "nexus-rt-tool-web": REPO / "nexus_tool_web",
    "nexus-rt-mcp": REPO / "nexus_mcp",
    "nexus-rt-agent": REPO / "nexus_agent",
    "nexus-rt-provider-openai": REPO / "nexus_provider_openai",
    "nexus-rt-provider-anthropic": REPO / "nexus_provider_anthropic",
    "nexus-rt-provider-gemini": REPO / "nexus_provider_gemini",
    "nexus-rt-durable": REPO / "nexus_durable",
    "nexus-rt-ray": REPO / "nexus_ray",
}


@pytest.fixture(scope="session", autouse=True)
def _state_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Point XDG_STATE_HOME and XDG_CACHE_HOME at temporary folders for the whole run: a Nexus
    whose config names no session_dir keeps its sessions below the first (docs/configuration.md),
    shell completion its cache of tool names below the second (docs/cli.md), and a test run must
    not leave folders in the home directory of whoever runs it."""
    with pytest.MonkeyPatch.context() as patch:
        state = tmp_path_factory.mktemp("xdg_state")
        patch.setenv("XDG_STATE_HOME", str(state))
        # pip keeps its cache below XDG_CACHE_HOME too: the fresh venvs' installs keep using the
        # person's, or every run would download every dependency again
        if "PIP_CACHE_DIR" not in os.environ:
            cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
            patch.setenv("PIP_CACHE_DIR", os.path.join(cache, "pip"))
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg_cache")))
        yield state


@pytest.fixture(scope="session", autouse=True)
def _config_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Point XDG_CONFIG_HOME at a temporary folder for the whole run: the `nexus` command line
    keeps its record of trusted configs below it (docs/configuration.md), and a test run must
    neither read the developer's records nor leave its own in their home directory."""
    with pytest.MonkeyPatch.context() as patch:
        home = tmp_path_factory.mktemp("xdg_config")
        patch.setenv("XDG_CONFIG_HOME", str(home))
        patch.delenv("NEXUS_TRUST_FILE", raising=False)
        yield home


def _run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str | Path], Path]:
    """`wheelhouse(name_or_folder)` -> a wheel of that package, built once per test session."""
    out = tmp_path_factory.mktemp("wheelhouse")
    built: dict[Path, Path] = {}

    def build(package: str | Path) -> Path:
        folder = PACKAGES[package] if isinstance(package, str) else Path(package)
        if folder not in built:
            dest = out / folder.name
            _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                  "-w", str(dest), str(folder)])
            built[folder] = next(dest.glob("*.whl"))
        return built[folder]

    return build


class FreshVenv:
    """A new virtual environment with only what a test installs into it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.bin = path / "bin"
        self.python = self.bin / "python"

    def install(self, *wheels: Path) -> None:
        _run([str(self.python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
              *map(str, wheels)])

    def run(self, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
            input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run a console script (or `python`) of this venv; never raises for a non-zero exit."""
        exe = self.bin / args[0]
        full_env = {k: v for k, v in os.environ.items() if not k.startswith(("NEXUS_", "PYTHON"))}
        full_env.update(env or {})
        return subprocess.run([str(exe), *args[1:]], capture_output=True, text=True, cwd=cwd,
                              env=full_env, input=input, timeout=timeout)


@pytest.fixture
def fresh_venv(tmp_path: Path, wheelhouse: Callable[[str | Path], Path]) -> Callable[..., FreshVenv]:
    """`fresh_venv("nexus-rt-core", "nexus-rt-tool-shell", Path("examples/x"))` -> a FreshVenv with
    wheels of exactly those packages installed (their dependencies from the package index)."""

    def make(*packages: str | Path) -> FreshVenv:
        path = tmp_path / "venv"
        _run([sys.executable, "-m", "venv", str(path)])
        venv = FreshVenv(path)
        venv.install(*(wheelhouse(p) for p in packages))
        return venv

    return make


@pytest.fixture
def fake_providers() -> Iterator[FakeProviders]:
    """A started fake LLM provider (tests/fakes/providers.py: OpenAI Chat Completions and
    Responses, Anthropic Messages, Gemini generateContent on one loopback port), closed after
    the test. Script replies with `fake_providers.script(endpoint, ...)`; read what the clients
    sent in `fake_providers.requests`."""
    with FakeProviders() as fake:
        yield fake
