"""`ctx.progress`: a handler tells whoever made the call how far it has got, through
`Nexus.invoke(..., progress=...)` (what `nexus mcp serve` turns into `notifications/progress`)."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from nexus_core import CallContext, Nexus, ToolCall, native_tool


def counting(arguments: dict[str, Any], ctx: CallContext) -> str:
    for done in range(3):
        ctx.progress(done, 2, f"step {done}")
    ctx.progress(3)  # no total, no message
    return "counted"


@pytest.fixture
def nx() -> Nexus:
    nexus = Nexus(autoload=False, tools=[native_tool("count", run=counting, ctx=True)])
    yield nexus  # type: ignore[misc]
    nexus.close()


def test_each_report_reaches_the_invokes_receiver_on_the_handlers_thread(nx: Nexus) -> None:
    reports: list[tuple[Any, ...]] = []
    threads: set[int] = set()

    def receive(done: float, total: float | None, message: str | None) -> None:
        reports.append((done, total, message))
        threads.add(threading.get_ident())

    result = nx.invoke("count", {}, progress=receive)
    assert result.output == "counted"
    assert reports == [(0, 2, "step 0"), (1, 2, "step 1"), (2, 2, "step 2"), (3, None, None)]
    assert threads == {threading.get_ident()}  # the caller's thread runs the handler here


def test_without_a_receiver_a_report_does_nothing(nx: Nexus) -> None:
    assert nx.invoke("count", {}).output == "counted"


def test_a_receiver_that_raises_is_logged_and_the_call_goes_on(nx: Nexus, caplog: pytest.LogCaptureFixture) -> None:
    def broken(done: float, total: float | None, message: str | None) -> None:
        raise RuntimeError("the client went away")

    with caplog.at_level(logging.ERROR, logger="nexus_core"):
        result = nx.invoke("count", {}, progress=broken)
    assert not result.is_error and result.output == "counted"
    assert caplog.text.count("the progress receiver of call") == 4 and "RuntimeError: the client went away" in caplog.text


def test_inner_calls_do_not_report_into_the_call_that_made_them(nx: Nexus) -> None:
    """An inner call's "2 of 2" is on its own scale, not its parent's: it reports to nobody
    unless its own invoke is given a receiver."""
    def outer(arguments: dict[str, Any], ctx: CallContext) -> str:
        ctx.progress(1, 10, "outer")
        ctx.nexus.invoke(ToolCall(name="count", parent_call_id=ctx.call_id))
        ctx.progress(10, 10, "outer done")
        return "outer"

    nx.add_tool(native_tool("outer", run=outer, ctx=True))
    reports: list[tuple[Any, ...]] = []
    nx.invoke("outer", {}, progress=lambda *report: reports.append(report))
    assert reports == [(1, 10, "outer"), (10, 10, "outer done")]
