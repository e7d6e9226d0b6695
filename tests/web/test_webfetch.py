"""`webfetch` against a real HTTP server on loopback: formats, the result, error statuses,
redirects, charsets, what is sent, and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from nexus_core.testing import NexusFactory, assert_error, assert_ok
from web_server import Site

from nexus_core import Nexus

NEXUS_CLI = Path(sys.executable).parent / "nexus"


def test_the_plugin_gives_one_tool_with_an_output_schema(web: Nexus) -> None:
    assert [t.name for t in web.tools()] == ["webfetch"]
    tool = web.tool("webfetch")
    assert tool is not None and tool.plugin == "nexus.tool.web"
    assert set(tool.output_schema["required"]) == {"url", "final_url", "status", "content_type", "content",
                                                   "truncated"}
    assert set(tool.input_schema["properties"]) == {"url", "format", "timeout", "max_bytes"}
    assert tool.annotations == {"readOnlyHint": True, "openWorldHint": True}


def test_html_becomes_markdown_by_default(web: Nexus, site: Site) -> None:
    result = assert_ok(web.invoke("webfetch", {"url": site.url("/page")}))
    assert result.output_structured == {
        "url": site.url("/page"), "final_url": site.url("/page"), "status": 200,
        "content_type": "text/html; charset=utf-8", "truncated": False,
        "content": "The test page\n\n# Hello, **web**\n\nA paragraph with [a link](/other) and some spaces.\n\n"
                   "- first\n- second\n\n```\ndef f():\n    return 1\n```",
    }
    assert result.output == result.output_structured["content"]
    assert result.metadata["connections"] == [{"host": "127.0.0.1", "address": "127.0.0.1"}]


def test_text_format_is_the_pages_text_without_markup(web: Nexus, site: Site) -> None:
    result = assert_ok(web.invoke("webfetch", {"url": site.url("/page"), "format": "text"}))
    assert result.output == ("The test page\n\nHello, web\n\nA paragraph with a link and some spaces.\n\n"
                             "first\nsecond\n\ndef f():\n    return 1")


def test_html_format_is_the_page_itself(web: Nexus, site: Site) -> None:
    result = assert_ok(web.invoke("webfetch", {"url": site.url("/page"), "format": "html"}))
    assert result.output.startswith("<!doctype html>") and "<script>" in result.output


def test_scripts_styles_and_inline_image_data_are_not_page_text(nexus_factory: NexusFactory, site: Site) -> None:
    from web_server import ROUTES

    body = (b"<html><body><p>kept</p><script>var secret = 1;</script><style>p{}</style>"
            b"<noscript>enable js</noscript><template>tpl</template><!-- a comment -->"
            b"<img src=\"data:image/png;base64," + b"QUFB" * 5000 + b"\" alt=\"logo\"><img src=\"/a.png\" alt=\"pic\">"
            b"</body></html>")
    ROUTES["/noise"] = lambda h, q: h.reply(200, body)
    try:
        nx = nexus_factory(plugins=["nexus.tool.web"],
                           config={"plugins": {"nexus.tool.web": {"allow_hosts": ["127.0.0.1"], "allow_ports": None}}})
        markdown = assert_ok(nx.invoke("webfetch", {"url": site.url("/noise")})).output
        text = assert_ok(nx.invoke("webfetch", {"url": site.url("/noise"), "format": "text"})).output
    finally:
        del ROUTES["/noise"]
    assert markdown == "kept\n\nlogo![pic](/a.png)"
    assert text == "kept"


@pytest.mark.parametrize(("path", "content_type", "content"), [
    ("/plain", "text/plain; charset=utf-8", "just text, <b>not</b> HTML\n"),
    ("/json", "application/json", '{"answer": 42, "html": "<p>x</p>"}'),
])
@pytest.mark.parametrize("fmt", ["markdown", "text", "html"])
def test_text_that_is_not_html_comes_back_as_it_is(web: Nexus, site: Site, path: str, content_type: str,
                                                   content: str, fmt: str) -> None:
    result = assert_ok(web.invoke("webfetch", {"url": site.url(path), "format": fmt}))
    assert result.output_structured["content"] == content
    assert result.output_structured["content_type"] == content_type


def test_a_body_without_content_type_is_sniffed(web: Nexus, site: Site) -> None:
    html = assert_ok(web.invoke("webfetch", {"url": site.url("/untyped?kind=html")}))
    assert html.output_structured["content_type"] == ""
    assert html.output.startswith("The test page\n\n# Hello, **web**")
    plain = assert_ok(web.invoke("webfetch", {"url": site.url("/untyped?kind=text")}))
    assert plain.output == "plain words\n"


def test_charsets_from_the_header_and_from_the_page(web: Nexus, site: Site) -> None:
    assert_ok(web.invoke("webfetch", {"url": site.url("/latin1")}), "café crème")
    assert_ok(web.invoke("webfetch", {"url": site.url("/meta-charset")}), "naïve €")


# -- statuses -----------------------------------------------------------------------------------


def test_a_404_is_an_error_that_shows_the_start_of_the_page(web: Nexus, site: Site) -> None:
    result = assert_error(web.invoke("webfetch", {"url": site.url("/status/404?say=No+such+thing")}),
                          kind="failure")
    assert result.error == f"HTTP 404 Not Found from {site.url('/status/404?say=No+such+thing')}\n\n" \
                           "# Error 404\n\nNo such thing"
    assert result.output == result.error


def test_a_long_error_page_shows_only_its_start(web: Nexus, site: Site) -> None:
    result = assert_error(web.invoke("webfetch", {"url": site.url("/status/500?say=oops&repeat=500")}))
    assert result.error.startswith(f"HTTP 500 Internal Server Error from {site.url('/status/500?say=oops&repeat=500')}"
                                   "\n\n# Error 500\n\noops")
    shown, _, rest = result.error.partition("\n\n")[2].rpartition("\n[... ")
    assert len(shown) == 2000 and rest.endswith(" more characters]")


def test_an_error_status_with_a_binary_body_does_not_show_it(web: Nexus, site: Site) -> None:
    result = assert_error(web.invoke("webfetch", {"url": site.url("/status-png")}))
    assert result.error == f"HTTP 404 Not Found from {site.url('/status-png')}\n\n[the body (image/png) is not text]"


# -- redirects ----------------------------------------------------------------------------------


def test_redirects_are_followed_and_reported(web: Nexus, site: Site) -> None:
    result = assert_ok(web.invoke("webfetch", {"url": site.url("/chain/3")}))
    assert result.output_structured["url"] == site.url("/chain/3")
    assert result.output_structured["final_url"] == site.url("/chain/0")
    assert result.output.startswith(f"[redirected to {site.url('/chain/0')}]\n\nThe test page")
    assert result.metadata["redirects"] == [site.url(f"/chain/{n}") for n in (2, 1, 0)]
    assert site.paths() == ["/chain/3", "/chain/2", "/chain/1", "/chain/0"]


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_every_redirect_status_is_followed_with_a_get(web: Nexus, site: Site, status: int) -> None:
    assert_ok(web.invoke("webfetch", {"url": site.url(f"/redirect?status={status}&to=/plain")}))
    assert site.paths() == ["/redirect", "/plain"]


def test_cookies_set_on_the_way_are_sent_on_but_not_kept_between_calls(web: Nexus, site: Site) -> None:
    first = assert_ok(web.invoke("webfetch", {"url": site.url("/set-cookie")}))
    assert json.loads(first.output_structured["content"])["Cookie"] == "session=abc123"
    second = assert_ok(web.invoke("webfetch", {"url": site.url("/echo")}))
    assert "Cookie" not in json.loads(second.output_structured["content"])


# -- what is sent -------------------------------------------------------------------------------


def test_the_request_names_the_host_and_asks_for_text_and_gzip(web: Nexus, site: Site) -> None:
    sent = json.loads(assert_ok(web.invoke("webfetch", {"url": site.url("/echo")})).output_structured["content"])
    assert sent["Host"] == f"127.0.0.1:{site.port}"
    assert sent["Accept-Encoding"] == "gzip, deflate"
    assert sent["Accept"].startswith("text/markdown")
    assert sent["User-Agent"].startswith("Mozilla/5.0 (compatible; nexus-webfetch/")
    assert not {"Authorization", "Cookie", "Proxy-Authorization"} & set(sent)


def test_the_user_agent_is_configurable(nexus_factory: NexusFactory, site: Site) -> None:
    nx = nexus_factory(plugins=["nexus.tool.web"], config={"plugins": {"nexus.tool.web": {
        "allow_hosts": ["127.0.0.1"], "allow_ports": None, "user_agent": "my-agent/1.0"}}})
    sent = json.loads(assert_ok(nx.invoke("webfetch", {"url": site.url("/echo")})).output_structured["content"])
    assert sent["User-Agent"] == "my-agent/1.0"


# -- arguments and settings ---------------------------------------------------------------------


@pytest.mark.parametrize("arguments", [
    {"url": "http://127.0.0.1/", "timeout": 121},
    {"url": "http://127.0.0.1/", "timeout": 0},
    {"url": "http://127.0.0.1/", "max_bytes": 10 * 1024 * 1024 + 1},
    {"url": "http://127.0.0.1/", "format": "pdf"},
    {"url": ""},
    {"url": "http://127.0.0.1/", "headers": {"X": "y"}},
])
def test_arguments_outside_the_schema_are_refused_before_anything_runs(web: Nexus, arguments: dict[str, object]) -> None:
    assert_error(web.invoke("webfetch", arguments), kind="invalid_arguments")


@pytest.mark.parametrize(("section", "message"), [
    ({"allow_hosts": ["localhost", "not a host!"]},
     "plugins.nexus.tool.web.allow_hosts[1]: 'not a host!' is not a host name"),
    ({"deny_hosts": ["10.0.0.0/33"]}, "plugins.nexus.tool.web.deny_hosts[0]: '10.0.0.0/33' is not a host name"),
    ({"allow_hosts": ["2130706433"]}, "plugins.nexus.tool.web.allow_hosts[0]: '2130706433' is not a host name"),
    ({"timeout_seconds": 200}, "plugins.nexus.tool.web.timeout_seconds (200) is more than max_timeout_seconds (120)"),
    ({"max_bytes": 100, "max_bytes_limit": 10}, "plugins.nexus.tool.web.max_bytes (100) is more than max_bytes_limit"),
])
def test_bad_settings_fail_the_plugin_with_the_key_named(nexus_factory: NexusFactory, section: dict[str, object],
                                                         message: str) -> None:
    nx = nexus_factory(plugins=["nexus.tool.web"], config={"plugins": {"nexus.tool.web": section}},
                       allow_failures=True)
    assert [f.name for f in nx.failures] == ["nexus.tool.web"]
    assert message in nx.failures[0].error
    assert nx.tools() == []


def test_an_unknown_setting_is_a_config_error(nexus_factory: NexusFactory) -> None:
    from nexus_core import ConfigError

    with pytest.raises(ConfigError, match=r"plugins\.nexus\.tool\.web.*allowed_hosts"):
        nexus_factory(plugins=["nexus.tool.web"], config={"plugins": {"nexus.tool.web": {"allowed_hosts": []}}})


def test_cli_call_prints_the_result(tmp_path: Path, site: Site) -> None:
    config = tmp_path / "nexus.yaml"
    config.write_text("skills: []\nplugins:\n  active: [nexus.tool.web]\n  nexus.tool.web:\n"
                      "    allow_hosts: [127.0.0.1]\n    allow_ports: null\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    proc = subprocess.run([str(NEXUS_CLI), "--trust-config", "--config", str(config), "call", "webfetch",
                           json.dumps({"url": site.url("/plain")}), "--json"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["output_structured"]["content"] == "just text, <b>not</b> HTML\n"
    refused = subprocess.run([str(NEXUS_CLI), "--trust-config", "--config", str(config), "call", "webfetch",
                              json.dumps({"url": "http://169.254.169.254/latest/meta-data/"})],
                             capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60, check=False)
    assert refused.returncode == 1
    assert "refused: 169.254.169.254 is a link-local address (cloud metadata)" in refused.stdout + refused.stderr


@pytest.mark.slow
def test_installs_alone_beside_nexus_core(fresh_venv: Any, tmp_path: Path, site: Site) -> None:
    """A wheel with its declared dependencies (httpx, httpcore, markdownify, beautifulsoup4) and
    nothing of this checkout's environment."""
    venv = fresh_venv("nexus-rt-core", "nexus-rt-tool-web")
    tools = venv.run("nexus", "tools", cwd=tmp_path)
    assert tools.returncode == 0, tools.stderr
    assert ["webfetch", "nexus.tool.web"] in [line.split()[:2] for line in tools.stdout.splitlines()]
    config = tmp_path / "nexus.yaml"
    config.write_text("plugins:\n  nexus.tool.web:\n    allow_hosts: [127.0.0.1]\n    allow_ports: null\n")
    call = venv.run("nexus", "--trust-config", "--config", str(config), "call", "webfetch", json.dumps({"url": site.url("/page")}),
                    cwd=tmp_path)
    assert call.returncode == 0, call.stderr
    assert call.stdout.startswith("The test page\n\n# Hello, **web**")
