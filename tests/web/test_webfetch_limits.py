"""What a slow, huge, compressed, binary or malformed response can do to a call: nothing past its
timeout, its size cap, or a clear error. Timeouts here are fractions of a second; every server
route that misbehaves would go on for a minute or for ever, so a call that returns at all with
the expected error has been cut off by the client, not finished by the server."""

from __future__ import annotations

import threading
import tracemalloc
from collections.abc import Iterator

import pytest
from nexus_core.testing import NexusFactory, assert_error, assert_ok
from web_server import GZIP_BOMB, Handler, Site

from nexus_core import Nexus
from nexus_tool_web import Settings, webfetch_tool

MARKDOWN_PAGE = ("The test page\n\n# Hello, **web**\n\nA paragraph with [a link](/other) and some spaces.\n\n"
                 "- first\n- second\n\n```\ndef f():\n    return 1\n```")

# -- the timeout covers the whole fetch -----------------------------------------------------------


def test_a_body_dripped_a_byte_at_a_time_is_cut_off_at_the_timeout(web: Nexus, site: Site) -> None:
    # a byte every 20 ms: no single read ever waits long, only the deadline can stop it
    result = assert_error(web.invoke("webfetch", {"url": site.url("/drip"), "timeout": 0.5}), kind="failure")
    assert result.error == f"timed out after 0.5 s reading the body of {site.url('/drip')}"
    assert site.client_gone.wait(30), "the client kept the connection open after the call ended"


def test_headers_dripped_a_byte_at_a_time_are_cut_off_at_the_timeout(web: Nexus, site: Site) -> None:
    result = assert_error(web.invoke("webfetch", {"url": site.url("/drip-headers"), "timeout": 0.5}))
    assert result.error == f"timed out after 0.5 s waiting for a response from {site.url('/drip-headers')}"
    assert site.client_gone.wait(30)


def test_a_server_that_never_answers_is_cut_off_at_the_timeout(web: Nexus, site: Site) -> None:
    result = assert_error(web.invoke("webfetch", {"url": site.url("/stall"), "timeout": 0.3}))
    assert result.error == f"timed out after 0.3 s waiting for a response from {site.url('/stall')}"
    assert site.client_gone.wait(30)


def test_the_timeout_covers_all_the_redirects_together(web: Nexus, site: Site) -> None:
    # each hop answers in 150 ms, well inside 0.5 s; five of them are not
    result = assert_error(web.invoke("webfetch", {"url": site.url("/slow-chain"), "timeout": 0.5}))
    assert result.error == f"timed out after 0.5 s waiting for a response from {site.url('/slow-chain')}"
    assert len(site.requests) >= 2  # it was the hops together, not one slow hop


@pytest.fixture
def stuck_dns() -> Iterator[threading.Event]:
    release = threading.Event()
    yield release
    release.set()  # let the lookup thread end


def test_a_lookup_that_hangs_is_cut_off_at_the_timeout(nexus_factory: NexusFactory, stuck_dns: threading.Event) -> None:
    def resolver(host: str, port: int) -> list[str]:
        stuck_dns.wait(60)
        return ["127.0.0.1"]

    nx = nexus_factory(tools=[webfetch_tool(Settings(allow_hosts=("127.0.0.1",)), resolver=resolver)])
    result = assert_error(nx.invoke("webfetch", {"url": "http://slow-dns.test/", "timeout": 0.3}))
    assert result.error == "timed out after 0.3 s resolving slow-dns.test"


def test_a_default_timeout_comes_from_the_config(nexus_factory: NexusFactory, site: Site) -> None:
    nx = nexus_factory(plugins=["nexus.tool.web"], config={"plugins": {"nexus.tool.web": {
        "allow_hosts": ["127.0.0.1"], "allow_ports": None, "timeout_seconds": 0.4}}})
    assert_error(nx.invoke("webfetch", {"url": site.url("/drip")}), "timed out after 0.4 s")


# -- the size cap holds while streaming -----------------------------------------------------------


def test_an_endless_body_is_cut_at_max_bytes(web: Nexus, site: Site) -> None:
    result = assert_ok(web.invoke("webfetch", {"url": site.url("/huge"), "max_bytes": 100_000}))
    assert result.output_structured["truncated"] is True
    assert result.output_structured["content"] == "z" * 100_000
    assert result.output.endswith("\n\n[truncated: the body is longer than max_bytes=100000]")
    assert site.client_gone.wait(30), "the client went on reading past the cap"


def test_the_default_cap_comes_from_the_config(nexus_factory: NexusFactory, site: Site) -> None:
    nx = nexus_factory(plugins=["nexus.tool.web"], config={"plugins": {"nexus.tool.web": {
        "allow_hosts": ["127.0.0.1"], "allow_ports": None, "max_bytes": 5000}}})
    result = assert_ok(nx.invoke("webfetch", {"url": site.url("/huge")}))
    assert len(result.output_structured["content"]) == 5000 and result.output_structured["truncated"]


def test_a_body_exactly_at_the_cap_is_not_truncated(web: Nexus, site: Site) -> None:
    size = len(b"just text, <b>not</b> HTML\n")
    exact = assert_ok(web.invoke("webfetch", {"url": site.url("/plain"), "max_bytes": size}))
    assert exact.output_structured["truncated"] is False
    short = assert_ok(web.invoke("webfetch", {"url": site.url("/plain"), "max_bytes": size - 1}))
    assert short.output_structured["truncated"] is True


@pytest.mark.parametrize("path", ["/gzip", "/deflate", "/deflate?raw=1"])
def test_gzip_and_deflate_bodies_are_decoded(web: Nexus, site: Site, path: str) -> None:
    assert_ok(web.invoke("webfetch", {"url": site.url(path)}), MARKDOWN_PAGE)


def test_a_gzip_bomb_is_capped_after_decompression_in_little_memory(web: Nexus, site: Site) -> None:
    bomb = GZIP_BOMB.data()  # made before measuring: 256 MiB of text in a few hundred KiB
    assert len(bomb) < 2 * 1024 * 1024
    tracemalloc.start()
    try:
        result = web.invoke("webfetch", {"url": site.url("/bomb"), "max_bytes": 1024 * 1024})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert_ok(result)
    assert result.output_structured["truncated"] is True
    assert result.output_structured["content"] == "A" * (1024 * 1024)
    # the body, its text and a few copies on the way: megabytes, not the bomb's 256 MiB
    assert peak < 16 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB"


def test_compressed_data_that_inflates_to_nothing_is_not_read_for_ever(web: Nexus, site: Site) -> None:
    result = assert_ok(web.invoke("webfetch", {"url": site.url("/empty-members"), "max_bytes": 1000}))
    assert result.output_structured == {**result.output_structured, "content": "", "truncated": True}
    assert site.client_gone.wait(30)


def test_corrupt_gzip_is_an_error(web: Nexus, site: Site) -> None:
    assert_error(web.invoke("webfetch", {"url": site.url("/corrupt-gzip")}), "the response's gzip data is corrupt: ")


@pytest.mark.parametrize(("path", "error"), [
    ("/br", ("refused: the response is compressed with br, which webfetch did not ask for (it accepts gzip "
             "and deflate)")),
    ("/double-gzip", ("refused: the response is compressed more than once (gzip, gzip); webfetch decodes one "
                      "layer of gzip or deflate")),
])
def test_codings_it_did_not_ask_for_are_refused(web: Nexus, site: Site, path: str, error: str) -> None:
    assert assert_error(web.invoke("webfetch", {"url": site.url(path)})).error == error


# -- binary content -------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "error"), [
    ("/png", ("refused: the response is image/png, which is not text; webfetch returns text only (HTML, "
              "Markdown, plain text, JSON, XML, ...)")),
    ("/octets", ("refused: the response is application/octet-stream, which is not text; webfetch returns text "
                 "only (HTML, Markdown, plain text, JSON, XML, ...)")),
    ("/lying", "refused: the response (declared text/html) holds binary data; webfetch returns text only"),
    ("/untyped?kind=binary", "refused: the response holds binary data; webfetch returns text only"),
])
def test_binary_content_is_refused_with_its_type(web: Nexus, site: Site, path: str, error: str) -> None:
    assert assert_error(web.invoke("webfetch", {"url": site.url(path)}), kind="failure").error == error


# -- malformed and hostile responses --------------------------------------------------------------


def test_huge_headers_are_refused_without_reading_them_all(web: Nexus, site: Site) -> None:
    result = assert_error(web.invoke("webfetch", {"url": site.url("/huge-headers")}))
    assert result.error == "127.0.0.1 sent more than 100 KiB of response headers; webfetch stops reading there"


def test_a_page_nested_too_deeply_for_markdown_still_gives_its_text(web: Nexus, site: Site) -> None:
    markdown = assert_ok(web.invoke("webfetch", {"url": site.url("/deep?depth=20000")}))
    assert markdown.output == ("[this page nests its elements too deeply to convert to Markdown (a limit of "
                               "Python's recursion); its plain text follows]\n\ndeep text")
    assert_ok(web.invoke("webfetch", {"url": site.url("/deep?depth=20000"), "format": "text"}), "deep text")
    assert_ok(web.invoke("webfetch", {"url": site.url("/deep?depth=50")}), "deep text")


def test_a_body_shorter_than_its_content_length_is_an_error(web: Nexus, site: Site) -> None:
    from web_server import ROUTES

    def short(h: Handler, q: dict[str, str]) -> None:
        h.close_connection = True
        h.raw(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\nonly this")

    ROUTES["/short"] = short
    try:
        result = assert_error(web.invoke("webfetch", {"url": site.url("/short"), "timeout": 5}))
    finally:
        del ROUTES["/short"]
    assert result.error.startswith("127.0.0.1 sent a response that breaks HTTP/1.1: ")


def test_an_error_page_in_a_coding_it_did_not_ask_for_still_reports_its_status(web: Nexus, site: Site) -> None:
    from web_server import ROUTES

    ROUTES["/br-404"] = lambda h, q: h.reply(404, b"\x1b\x03\x00\xf8\xa5\x82\x14", headers={"Content-Encoding": "br"})
    try:
        result = assert_error(web.invoke("webfetch", {"url": site.url("/br-404")}))
    finally:
        del ROUTES["/br-404"]
    assert result.error == f"HTTP 404 Not Found from {site.url('/br-404')}"
