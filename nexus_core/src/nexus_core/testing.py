"""A pytest plugin for Nexus plugin authors (entry point `pytest11: nexus`).

    def test_my_gate(nexus_factory):
        nx = nexus_factory(plugins=["nexus.tool.shell", MyGate()])
        result = nx.invoke("shell", {"command": "rm -rf /"})
        assert_vetoed(result, "rm")

`nexus_factory(...)` builds a configured `Nexus` with only the plugins you name (installed plugin
ids, or plugin objects), a temporary workspace, and closes it after the test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ._models import ToolResult
from ._nexus import Nexus

NexusFactory = Callable[..., Nexus]


def assert_ok(result: ToolResult, output: str | None = None) -> ToolResult:
    """Assert the call succeeded (and, given `output`, that its output is exactly that)."""
    __tracebackhide__ = True
    if result.is_error:
        pytest.fail(f"expected {result.name} to succeed, got error ({result.error_kind}): {result.error}")
    if output is not None and result.output != output:
        pytest.fail(f"expected output {output!r} from {result.name}, got {result.output!r}")
    return result


def assert_error(result: ToolResult, contains: str | None = None, kind: str | None = None) -> ToolResult:
    """Assert the call failed, optionally with text in its error and of a given `error_kind`."""
    __tracebackhide__ = True
    if not result.is_error:
        pytest.fail(f"expected {result.name} to fail, got output {result.output!r}")
    if kind is not None and result.error_kind != kind:
        pytest.fail(f"expected error kind {kind!r}, got {result.error_kind!r}: {result.error}")
    if contains is not None and contains not in (result.error or ""):
        pytest.fail(f"expected {contains!r} in the error, got {result.error!r}")
    return result


def assert_vetoed(result: ToolResult, reason: str | None = None) -> ToolResult:
    """Assert a gate refused the call (with `reason` in the message, when given)."""
    __tracebackhide__ = True
    return assert_error(result, reason, kind="vetoed")


@pytest.fixture
def nexus_workspace(tmp_path: Path) -> Path:
    """An empty folder used as the workspace of the Nexus that `nexus_factory` builds."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    return ws


@pytest.fixture
def nexus_factory(nexus_workspace: Path, tmp_path: Path) -> Iterator[NexusFactory]:
    """Build Nexus instances: `nexus_factory(plugins=[ids or objects], config={...}, tools=[...])`.

    Installed plugins are loaded only when named (by id in `plugins`, or in the config's
    `plugins.active`), so a test sees exactly the plugins it asks for. `config` is the usual
    config dict; its `workspace` and `session_dir` default to temporary folders. A named plugin
    that fails to load fails the test with the reason, unless `allow_failures=True` (then see
    `nx.failures`). Every Nexus built is closed after the test.
    """
    made: list[Nexus] = []

    def factory(
        plugins: Iterable[Any] = (),
        config: dict[str, Any] | None = None,
        tools: Iterable[Any] = (),
        *,
        allow_failures: bool = False,
    ) -> Nexus:
        __tracebackhide__ = True
        plugins = list(plugins)
        ids = [p for p in plugins if isinstance(p, str)]
        objects = [p for p in plugins if not isinstance(p, str)]
        cfg: dict[str, Any] = {
            "workspace": str(nexus_workspace),
            "session_dir": str(tmp_path / "sessions"),
            "skills": [],
        }
        cfg.update(config or {})
        section = dict(cfg.get("plugins") or {})
        active = section.get("active", [])
        if active is not None or ids:  # `active: None` asks for every installed plugin
            section["active"] = list(dict.fromkeys([*(active or []), *ids]))
        cfg["plugins"] = section
        nx = Nexus.from_config(cfg, plugins=objects, tools=tools)
        made.append(nx)
        if nx.failures and not allow_failures:
            pytest.fail("plugins failed to load:\n" + "\n".join(
                f"  {f.name} ({f.phase}): {f.error}\n{f.detail}" for f in nx.failures
            ))
        return nx

    yield factory
    for nx in made:
        nx.close()


@pytest.fixture
def nexus(nexus_factory: NexusFactory) -> Nexus:
    """A Nexus with no plugins loaded: register what the test needs with `nexus.register`."""
    return nexus_factory()


__all__ = ["assert_error", "assert_ok", "assert_vetoed", "nexus", "nexus_factory", "nexus_workspace"]
