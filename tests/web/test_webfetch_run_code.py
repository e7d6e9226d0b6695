"""webfetch from a run_code script: the host fetches, through its gates, in parallel; the script's
sandbox still has no network of its own."""

from __future__ import annotations

import textwrap
import threading
from typing import Any

from nexus_core.testing import NexusFactory, assert_ok
from web_server import Site

from nexus_core import Nexus, ToolCall, ToolDef, Veto, hookimpl
from nexus_tool_code_exec import DEFAULT_ALLOWED_PACKAGES

CE = "nexus.tool.code_exec"
WEB = "nexus.tool.web"
LOOPBACK = {"allow_hosts": ["127.0.0.1"], "allow_ports": None}


class Gate:
    """Records every call the host sees; vetoes fetches of URLs with "forbidden" in them."""

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self.lock = threading.Lock()

    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Veto | None:
        with self.lock:
            self.calls.append(call)
        if "forbidden" in str(call.arguments.get("url", "")):
            return Veto("this session may not fetch that")
        return None


def run(nx: Nexus, script: str) -> Any:
    return nx.invoke(ToolCall(id="call_script", name="run_code", arguments={"script": textwrap.dedent(script)}))


def test_a_script_fetches_pages_in_parallel_through_the_host(nexus_factory: NexusFactory, site: Site) -> None:
    gate = Gate()
    nx = nexus_factory(plugins=[CE, WEB, gate],
                       config={"plugins": {CE: {"timeout_seconds": 20, "max_workers": 4}, WEB: LOOPBACK}})
    urls = [site.url(path) for path in ("/page", "/plain", "/json", "/chain/2")]
    result = assert_ok(run(nx, f"""\
        import tools, parallel

        def run(ctx):
            pages = parallel.map({urls!r}, lambda url: tools.webfetch(url=url, format="text"))
            for page in pages:
                print(page.status, page.final_url.rsplit("/", 1)[1], page.truncated)
            return [page.content for page in pages]
        """))
    assert result.output_structured["result"] == [
        ("The test page\n\nHello, web\n\nA paragraph with a link and some spaces.\n\nfirst\nsecond\n\n"
         "def f():\n    return 1"),
        "just text, <b>not</b> HTML\n",
        '{"answer": 42, "html": "<p>x</p>"}',
        ("The test page\n\nHello, web\n\nA paragraph with a link and some spaces.\n\nfirst\nsecond\n\n"
         "def f():\n    return 1"),
    ]
    assert result.output_structured["stdout"] == "200 page False\n200 plain False\n200 json False\n200 0 False\n"
    inner = [c for c in gate.calls if c.parent_call_id == "call_script"]
    assert sorted(c.arguments["url"] for c in inner) == sorted(urls)
    assert all(c.name == "webfetch" for c in inner)
    assert sorted(site.paths()) == sorted(["/page", "/plain", "/json", "/chain/2", "/chain/1", "/chain/0"])


def test_refusals_vetoes_and_error_statuses_reach_the_script_as_exceptions(nexus_factory: NexusFactory,
                                                                         site: Site) -> None:
    nx = nexus_factory(plugins=[CE, WEB, Gate()], config={"plugins": {CE: {"timeout_seconds": 20}, WEB: LOOPBACK}})
    result = assert_ok(run(nx, f"""\
        import tools

        def run(ctx):
            outcomes = []
            for url in ["http://169.254.169.254/latest/meta-data/", {site.url("/status/404")!r},
                        {site.url("/forbidden")!r}]:
                try:
                    tools.webfetch(url=url)
                    outcomes.append("fetched")
                except tools.ToolVetoed as exc:
                    outcomes.append("vetoed: " + exc.reason)
                except tools.ToolFailed as exc:
                    outcomes.append(exc.reason.splitlines()[0])
            return outcomes
        """))
    assert result.output_structured["result"] == [
        ("refused: 169.254.169.254 is a link-local address (cloud metadata); allow it with "
         "plugins.nexus.tool.web.allow_hosts"),
        f"HTTP 404 Not Found from {site.url('/status/404')}",
        "vetoed: this session may not fetch that",  # ToolVetoed.reason is the reason alone
    ]
    assert site.paths() == ["/status/404"]


def test_the_script_itself_still_has_no_network(nexus_factory: NexusFactory, site: Site) -> None:
    # socket is allowed past the script check on purpose: the operating system is the boundary
    nx = nexus_factory(plugins=[CE, WEB], config={"plugins": {
        CE: {"timeout_seconds": 20, "allowed_packages": [*DEFAULT_ALLOWED_PACKAGES, "socket"]}, WEB: LOOPBACK}})
    result = assert_ok(run(nx, f"""\
        import socket
        import tools

        def run(ctx):
            through_host = tools.webfetch(url={site.url("/plain")!r}).content
            try:
                socket.create_connection(("127.0.0.1", {site.port}), timeout=2).close()
                direct = "connected"
            except OSError as exc:
                direct = ("PermissionError: " if isinstance(exc, PermissionError) else "OSError: ") + str(exc)
            return {{"through_host": through_host, "direct": direct}}
        """))
    outcome = result.output_structured["result"]
    assert outcome["through_host"] == "just text, <b>not</b> HTML\n"
    assert outcome["direct"] == "PermissionError: [Errno 1] Operation not permitted"  # seccomp refuses socket()
    assert site.connections == ["127.0.0.1"] and site.paths() == ["/plain"]
