"""Attempts to make webfetch reach what it must not: private, loopback, link-local and metadata
addresses, in every spelling a URL allows, directly, by redirect and by DNS rebinding; other
schemes, credentials, odd ports; proxies from the environment; a certificate for another name.

Each attempt is a test that must fail to get through. Where the forbidden target is a real
server on loopback, the test also shows that server was never connected to.
"""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Iterator
from ipaddress import ip_address

import pytest
from nexus_core.testing import NexusFactory, assert_error, assert_ok
from nexus_tool_web._policy import address_kind
from web_server import Site

from nexus_core import Nexus
from nexus_tool_web import Settings, webfetch_tool

ALLOW = "allow it with plugins.nexus.tool.web.allow_hosts"


class Resolver:
    """A resolver hook: answers from a table (a list of answers is used one lookup at a time, the
    last one repeating), and records every lookup."""

    def __init__(self, table: dict[str, list[str] | list[list[str]]]) -> None:
        self.table = table
        self.lookups: list[tuple[str, int]] = []
        self._lock = threading.Lock()

    def __call__(self, host: str, port: int) -> list[str]:
        with self._lock:
            self.lookups.append((host, port))
            answers = self.table[host]
            if answers and isinstance(answers[0], list):
                seen = sum(1 for h, _ in self.lookups if h == host)
                return list(answers[min(seen, len(answers)) - 1])
            return list(answers)  # type: ignore[arg-type]


def tool_nexus(nexus_factory: NexusFactory, resolver: Resolver | None = None, **settings: object) -> Nexus:
    settings.setdefault("allow_ports", None)
    return nexus_factory(tools=[webfetch_tool(Settings(**settings), resolver=resolver)])  # type: ignore[arg-type]


@pytest.fixture
def strict(nexus_factory: NexusFactory) -> Nexus:
    """The plugin with its defaults: nothing private allowed, ports 80 and 443."""
    return nexus_factory(plugins=["nexus.tool.web"])


@pytest.fixture
def twins() -> Iterator[tuple[Site, Site]]:
    """Two servers on one port: 127.0.0.1 (the one a test allows) and 127.0.0.2 (the one it must
    never reach)."""
    for _ in range(20):
        outer = Site("127.0.0.1")
        try:
            inner = Site("127.0.0.2", outer.port)
        except OSError:  # that port is taken on 127.0.0.2: try another
            outer.close()
            continue
        yield outer, inner
        outer.close()
        inner.close()
        return
    pytest.fail("no port free on both 127.0.0.1 and 127.0.0.2")


# -- addresses, in every spelling ----------------------------------------------------------------


@pytest.mark.parametrize(("url", "error"), [
    ("http://169.254.169.254/latest/meta-data/", f"169.254.169.254 is a link-local address (cloud metadata); {ALLOW}"),
    ("http://169.254.170.2/v2/credentials", f"169.254.170.2 is a link-local address (cloud metadata); {ALLOW}"),
    ("http://100.100.100.200/latest/", f"100.100.100.200 is a shared address (carrier-grade NAT) (cloud metadata); {ALLOW}"),
    ("http://[fd00:ec2::254]/latest/", f"fd00:ec2::254 is a unique-local (private) address (cloud metadata); {ALLOW}"),
    ("http://169.254.1.1/", f"169.254.1.1 is a link-local address; {ALLOW}"),
    ("http://127.0.0.1/", f"127.0.0.1 is a loopback address; {ALLOW}"),
    ("http://127.255.0.9/", f"127.255.0.9 is a loopback address; {ALLOW}"),
    ("http://10.0.0.1/", f"10.0.0.1 is a private address; {ALLOW}"),
    ("http://172.16.5.4/", f"172.16.5.4 is a private address; {ALLOW}"),
    ("http://192.168.1.1/", f"192.168.1.1 is a private address; {ALLOW}"),
    ("http://100.64.0.1/", f"100.64.0.1 is a shared address (carrier-grade NAT); {ALLOW}"),
    ("http://224.0.0.1/", f"224.0.0.1 is a multicast address; {ALLOW}"),
    ("http://240.0.0.1/", f"240.0.0.1 is a reserved address; {ALLOW}"),
    ("http://255.255.255.255/", f"255.255.255.255 is the broadcast address; {ALLOW}"),
    ("http://192.0.0.192/", f"192.0.0.192 is an IETF protocol-assignment address (cloud metadata); {ALLOW}"),
    ("http://198.18.0.1/", f"198.18.0.1 is a benchmarking address; {ALLOW}"),
    ("http://0.0.0.0/", f"0.0.0.0 is the unspecified address (connecting to it reaches this machine); {ALLOW}"),
    ("http://0.1.2.3/", f"0.1.2.3 is a 'this network' address; {ALLOW}"),
    ("http://[::]/", f":: is the unspecified address (connecting to it reaches this machine); {ALLOW}"),
    ("http://[::1]/", f"::1 is a loopback address; {ALLOW}"),
    ("http://[fe80::1]/", f"fe80::1 is a link-local address; {ALLOW}"),
    ("http://[fc00::5]/", f"fc00::5 is a unique-local (private) address; {ALLOW}"),
    ("http://[fec0::1]/", f"fec0::1 is a site-local address; {ALLOW}"),
    ("http://[ff02::1]/", f"ff02::1 is a multicast address; {ALLOW}"),
    ("http://[::ffff:127.0.0.1]/", "is the IPv4-mapped form of 127.0.0.1, a loopback address"),
    ("http://[::ffff:169.254.169.254]/",
     "is the IPv4-mapped form of 169.254.169.254, a link-local address (cloud metadata)"),
    ("http://[64:ff9b::a9fe:a9fe]/", "is the NAT64 form of 169.254.169.254, a link-local address (cloud metadata)"),
    ("http://[2002:a00:1::]/", "is the 6to4 form of 10.0.0.1, a private address"),
    ("http://[::7f00:1]/", "::7f00:1 is a reserved address (outside the global unicast range 2000::/3)"),
    ("http://[2001::1]/", "2001::1 is an IETF protocol-assignment address (Teredo and others)"),
])
def test_special_addresses_are_refused_naming_the_rule(strict: Nexus, url: str, error: str) -> None:
    result = assert_error(strict.invoke("webfetch", {"url": url}), kind="failure")
    assert result.error.startswith("refused: ") and error in result.error


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "1.1.1.1", "2606:4700:4700::1111",
                                     "2a00:1450:4001::200e", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1"])
def test_public_addresses_pass_the_rules(address: str) -> None:
    # (the tests have no internet to fetch from, so the rule is asked directly)
    assert address_kind(ip_address(address)) is None


@pytest.mark.parametrize("host", ["2130706433", "0x7f000001", "017700000001", "127.1", "0x7f.1", "127.0.1",
                                  "0x7f.0.0.1", "0177.1", "127.000000000000001"])
def test_ipv4_in_non_standard_forms_is_refused_even_where_the_address_is_allowed(
        nexus_factory: NexusFactory, site: Site, host: str) -> None:
    nx = tool_nexus(nexus_factory, allow_hosts=("127.0.0.1",))
    result = assert_error(nx.invoke("webfetch", {"url": f"http://{host}:{site.port}/page"}))
    assert result.error.startswith(f"refused: {host} is the IPv4 address 127.0.0.1 written in a non-standard "
                                   "form; write an address as four decimal numbers (127.0.0.1)")
    assert site.connections == []


def test_a_dotted_address_with_leading_zeros_is_an_invalid_url(strict: Nexus) -> None:
    assert_error(strict.invoke("webfetch", {"url": "http://0177.0.0.1/"}),
                 "invalid URL 'http://0177.0.0.1/': Invalid IPv4 address")


def test_localhost_by_name_is_refused_by_default(strict: Nexus, site: Site) -> None:
    for name in ["localhost", "LOCALHOST"]:
        result = assert_error(strict.invoke("webfetch", {"url": f"http://{name}/page"}))
        assert result.error.startswith("refused: localhost resolves to ")
        assert "a loopback address" in result.error
    assert site.connections == []


def test_a_name_with_a_public_and_a_private_address_is_refused(nexus_factory: NexusFactory, site: Site) -> None:
    resolver = Resolver({"mixed.test": ["93.184.216.34", "127.0.0.1"]})
    nx = tool_nexus(nexus_factory, resolver)
    result = assert_error(nx.invoke("webfetch", {"url": f"http://mixed.test:{site.port}/page"}))
    assert result.error == f"refused: mixed.test resolves to 127.0.0.1, a loopback address; {ALLOW}"
    assert site.connections == []


# -- the URL itself ------------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "error"), [
    ("file:///etc/passwd", "refused: a file: URL is not fetched; webfetch fetches only http and https URLs"),
    ("ftp://example.com/x", "refused: a ftp: URL is not fetched; webfetch fetches only http and https URLs"),
    ("gopher://example.com/", "refused: a gopher: URL is not fetched; webfetch fetches only http and https URLs"),
    ("javascript:alert(1)", "refused: a javascript: URL is not fetched; webfetch fetches only http and https URLs"),
    ("data:text/html,<h1>x</h1>", "refused: a data: URL is not fetched; webfetch fetches only http and https URLs"),
    ("example.com/page", "'example.com/page' is not a full URL: give its scheme too, such as https://example.com/page"),
    ("http:///nohost", "refused: http:/nohost names no host"),
    ("http://user:hunter2@example.com/", ("refused: http://user:***@example.com/ carries a user name or password; "
                                          "webfetch sends no credentials, so give the URL without them")),
    ("http://example.com@169.254.169.254/", ("refused: http://example.com@169.254.169.254/ carries a user name or "
                                             "password")),
    ("http://example.com:25/", ("refused: port 25 is not in plugins.nexus.tool.web.allow_ports (80, 443); allow it "
                                "there")),
    ("http://example.com:6379/", "refused: port 6379 is not in plugins.nexus.tool.web.allow_ports (80, 443)"),
    ("http://example.com:0/", "refused: port 0 of http://example.com:0/ is not a TCP port (1-65535)"),
    ("http://example.com:99999/", "refused: port 99999 of http://example.com:99999/ is not a TCP port (1-65535)"),
    ("http://exa mple.com/", "refused: 'exa%20mple.com' is not a valid host name"),
    ("http://example.com/a\r\nX-Injected: 1", "invalid URL 'http://example.com/a\\r\\nX-Injected: 1'"),
    ("http://a..b/", "refused: 'a..b' is not a valid host name"),
    ("http://☃.net/", "invalid URL 'http://☃.net/': Invalid IDNA hostname"),
    ("http://[fe80::1%25eth0]/", f"refused: fe80::1%25eth0 is a link-local address; {ALLOW}"),
    ("http://" + "a" * 64 + ".com/", "is not a valid host name"),
])
def test_urls_that_are_not_plain_http_are_refused(strict: Nexus, url: str, error: str) -> None:
    assert error in assert_error(strict.invoke("webfetch", {"url": url}), kind="failure").error


def test_ports_are_allowed_by_the_config(nexus_factory: NexusFactory, site: Site) -> None:
    blocked = tool_nexus(nexus_factory, allow_hosts=("127.0.0.1",), allow_ports=(80, 443))
    assert_error(blocked.invoke("webfetch", {"url": site.url("/page")}),
                 f"refused: port {site.port} is not in plugins.nexus.tool.web.allow_ports (80, 443)")
    assert site.connections == []
    opened = tool_nexus(nexus_factory, allow_hosts=("127.0.0.1",), allow_ports=(site.port,))
    assert_ok(opened.invoke("webfetch", {"url": site.url("/page")}))


def test_an_idn_is_fetched_by_its_ascii_name_and_matched_in_the_lists(nexus_factory: NexusFactory, site: Site) -> None:
    resolver = Resolver({"xn--bcher-kva.test": ["127.0.0.1"]})
    nx = tool_nexus(nexus_factory, resolver, allow_hosts=("127.0.0.1",))
    result = assert_ok(nx.invoke("webfetch", {"url": f"http://bücher.test:{site.port}/echo"}))
    assert resolver.lookups == [("xn--bcher-kva.test", site.port)]
    assert result.output_structured["final_url"] == f"http://xn--bcher-kva.test:{site.port}/echo"
    assert json.loads(result.output_structured["content"])["Host"] == f"xn--bcher-kva.test:{site.port}"
    denied = tool_nexus(nexus_factory, resolver, allow_hosts=("127.0.0.1",), deny_hosts=("BÜCHER.test",))
    assert_error(denied.invoke("webfetch", {"url": f"http://xn--bcher-kva.test:{site.port}/"}),
                 "refused: xn--bcher-kva.test is in plugins.nexus.tool.web.deny_hosts ('BÜCHER.test')")


# -- redirects -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("location", "error"), [
    ("file:///etc/passwd", "a file: URL is not fetched"),
    ("ftp://127.0.0.1/", "a ftp: URL is not fetched"),
    ("http://169.254.169.254/latest/meta-data/iam/", "169.254.169.254 is a link-local address (cloud metadata)"),
    ("http://10.0.0.1/admin", "10.0.0.1 is a private address"),
    ("http://[::1]/", "::1 is a loopback address"),
    ("http://2130706433/", "2130706433 is the IPv4 address 127.0.0.1 written in a non-standard form"),
    ("http://admin:pw@127.0.0.1/", "carries a user name or password"),
])
def test_a_redirect_is_checked_like_the_first_url(web: Nexus, site: Site, location: str, error: str) -> None:
    url = site.url(f"/redirect?to={location}")
    result = assert_error(web.invoke("webfetch", {"url": url}))
    assert result.error.startswith("refused: ") and error in result.error
    assert result.error.endswith(f" (redirect 1, from {url})")
    assert site.paths() == ["/redirect"]


def test_a_redirect_chain_that_ends_on_a_private_address_is_refused_at_that_hop(
        nexus_factory: NexusFactory, twins: tuple[Site, Site]) -> None:
    outer, inner = twins
    resolver = Resolver({"inside.test": ["127.0.0.2"]})
    nx = tool_nexus(nexus_factory, resolver, allow_hosts=("127.0.0.1",))
    end = f"http://inside.test:{outer.port}/echo"
    result = assert_error(nx.invoke("webfetch", {"url": outer.url(f"/chain/2?end={end}")}))
    assert result.error == (f"refused: inside.test resolves to 127.0.0.2, a loopback address; {ALLOW} "
                            f"(redirect 3, from {outer.url(f'/chain/0?end={end}')})")
    assert outer.paths() == ["/chain/2", "/chain/1", "/chain/0"]
    assert inner.connections == []


def test_more_redirects_than_the_limit_are_refused(web: Nexus, site: Site, nexus_factory: NexusFactory) -> None:
    result = assert_error(web.invoke("webfetch", {"url": site.url("/loop")}))
    assert result.error == (f"refused: {site.url('/loop')} redirects more than 5 times "
                            f"(plugins.nexus.tool.web.max_redirects); the last one leads to {site.url('/loop')}")
    assert len(site.requests) == 6
    none = nexus_factory(plugins=["nexus.tool.web"], config={"plugins": {"nexus.tool.web": {
        "allow_hosts": ["127.0.0.1"], "allow_ports": None, "max_redirects": 0}}})
    assert_error(none.invoke("webfetch", {"url": site.url("/chain/1")}), "redirects more than 0 times")


# -- allow and deny lists ------------------------------------------------------------------------


def test_a_name_in_allow_hosts_may_resolve_to_a_private_address(nexus_factory: NexusFactory, site: Site) -> None:
    resolver = Resolver({"intranet.test": ["127.0.0.1"], "other.test": ["127.0.0.1"], "a.wiki.test": ["127.0.0.1"]})
    nx = tool_nexus(nexus_factory, resolver, allow_hosts=("intranet.test", "*.wiki.test"))
    assert_ok(nx.invoke("webfetch", {"url": f"http://intranet.test:{site.port}/plain"}))
    assert_ok(nx.invoke("webfetch", {"url": f"http://a.wiki.test:{site.port}/plain"}))
    assert_error(nx.invoke("webfetch", {"url": f"http://other.test:{site.port}/plain"}),
                 f"refused: other.test resolves to 127.0.0.1, a loopback address; {ALLOW}")
    # the name, not the address, was allowed: the same address by number is still refused
    assert_error(nx.invoke("webfetch", {"url": site.url("/plain")}), "refused: 127.0.0.1 is a loopback address")
    assert len(site.requests) == 2


def test_a_network_in_allow_hosts_allows_its_addresses_and_no_others(nexus_factory: NexusFactory,
                                                                     twins: tuple[Site, Site]) -> None:
    outer, inner = twins
    nx = tool_nexus(nexus_factory, allow_hosts=("127.0.0.1/32",))
    assert_ok(nx.invoke("webfetch", {"url": outer.url("/plain")}))
    assert_error(nx.invoke("webfetch", {"url": inner.url("/plain")}), "refused: 127.0.0.2 is a loopback address")
    assert inner.connections == []


def test_deny_hosts_wins_over_allow_hosts_and_applies_to_public_hosts(nexus_factory: NexusFactory, site: Site) -> None:
    resolver = Resolver({"ads.tracker.test": ["127.0.0.1"], "news.test": ["93.184.216.34"]})
    nx = tool_nexus(nexus_factory, resolver, allow_hosts=("127.0.0.0/8", "*.tracker.test"),
                    deny_hosts=("*.tracker.test", "127.0.0.1", "news.test"))
    assert_error(nx.invoke("webfetch", {"url": f"http://ads.tracker.test:{site.port}/"}),
                 "refused: ads.tracker.test is in plugins.nexus.tool.web.deny_hosts ('*.tracker.test')")
    assert_error(nx.invoke("webfetch", {"url": site.url("/")}),
                 "refused: 127.0.0.1 is in plugins.nexus.tool.web.deny_hosts ('127.0.0.1')")
    assert_error(nx.invoke("webfetch", {"url": "http://news.test/"}),
                 "refused: news.test is in plugins.nexus.tool.web.deny_hosts ('news.test')")
    assert site.connections == []
    assert resolver.lookups == []  # denied by name before any lookup


def test_a_denied_address_is_refused_whatever_name_leads_to_it(nexus_factory: NexusFactory, site: Site) -> None:
    resolver = Resolver({"innocent.test": ["127.0.0.1"]})
    nx = tool_nexus(nexus_factory, resolver, allow_hosts=("innocent.test",), deny_hosts=("127.0.0.0/8",))
    assert_error(nx.invoke("webfetch", {"url": f"http://innocent.test:{site.port}/"}),
                 "refused: innocent.test resolves to 127.0.0.1, which is in plugins.nexus.tool.web.deny_hosts "
                 "('127.0.0.0/8')")
    assert site.connections == []


def test_only_hosts_restricts_every_url_and_every_redirect(nexus_factory: NexusFactory, site: Site) -> None:
    resolver = Resolver({"docs.test": ["127.0.0.1"], "elsewhere.test": ["127.0.0.1"]})
    nx = tool_nexus(nexus_factory, resolver, allow_hosts=("127.0.0.1",), only_hosts=("docs.test",))
    assert_ok(nx.invoke("webfetch", {"url": f"http://docs.test:{site.port}/chain/1"}))
    assert_error(nx.invoke("webfetch", {"url": f"http://elsewhere.test:{site.port}/plain"}),
                 "refused: elsewhere.test is not in plugins.nexus.tool.web.only_hosts")
    assert_error(nx.invoke("webfetch", {"url": site.url("/plain")}),
                 "refused: 127.0.0.1 is not in plugins.nexus.tool.web.only_hosts")
    away = f"http://elsewhere.test:{site.port}/plain"
    result = assert_error(nx.invoke("webfetch", {"url": f"http://docs.test:{site.port}/redirect?to={away}"}))
    assert result.error == (f"refused: elsewhere.test is not in plugins.nexus.tool.web.only_hosts (redirect 1, "
                            f"from http://docs.test:{site.port}/redirect?to={away})")
    assert site.paths() == ["/chain/1", "/chain/0", "/redirect"]
    assert [host for host, _ in resolver.lookups] == ["docs.test"] * 3  # elsewhere.test: never looked up


# -- DNS rebinding -------------------------------------------------------------------------------


def test_dns_rebinding_cannot_swap_the_checked_address(nexus_factory: NexusFactory, twins: tuple[Site, Site]) -> None:
    """The name answers an allowed address first and a forbidden one on every later lookup. A
    client that checked one answer and let the connection look the name up again would reach the
    forbidden server; this one connects to the address it checked."""
    outer, inner = twins
    resolver = Resolver({"rebind.test": [["127.0.0.1"], ["127.0.0.2"]]})
    nx = tool_nexus(nexus_factory, resolver, allow_hosts=("127.0.0.1",))
    result = assert_ok(nx.invoke("webfetch", {"url": f"http://rebind.test:{outer.port}/echo"}))
    assert json.loads(result.output_structured["content"])["Host"] == f"rebind.test:{outer.port}"
    assert resolver.lookups == [("rebind.test", outer.port)]  # one lookup: the one that was checked
    assert outer.connections == ["127.0.0.1"] and inner.connections == []
    assert result.metadata["connections"] == [{"host": "rebind.test", "address": "127.0.0.1"}]
    # the next call looks again, gets the forbidden answer, and refuses it
    assert_error(nx.invoke("webfetch", {"url": f"http://rebind.test:{outer.port}/echo"}),
                 f"refused: rebind.test resolves to 127.0.0.2, a loopback address; {ALLOW}")
    assert inner.connections == []


def test_each_redirect_hop_is_resolved_and_checked_again(nexus_factory: NexusFactory, twins: tuple[Site, Site]) -> None:
    outer, inner = twins
    resolver = Resolver({"hop.test": [["127.0.0.1"], ["127.0.0.2"]]})
    nx = tool_nexus(nexus_factory, resolver, allow_hosts=("127.0.0.1",))
    # the first hop's connection is closed ("Connection: close"), so the second needs a new one
    result = assert_error(nx.invoke("webfetch", {"url": f"http://hop.test:{outer.port}/chain/1"}))
    assert result.error.startswith("refused: hop.test resolves to 127.0.0.2, a loopback address")
    assert resolver.lookups == [("hop.test", outer.port)] * 2
    assert inner.connections == []


# -- TLS: the name, not the address ---------------------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> object:
    trustme = pytest.importorskip("trustme")
    return trustme.CA()


@pytest.fixture
def tls_site(ca: object) -> Iterator[Site]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("web.test").configure_cert(context)  # type: ignore[attr-defined]
    server = Site(tls=context)
    yield server
    server.close()


def trusting(ca: object) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)  # type: ignore[attr-defined]
    return context


def test_https_to_a_pinned_address_keeps_sni_host_and_certificate_on_the_name(
        nexus_factory: NexusFactory, tls_site: Site, ca: object) -> None:
    resolver = Resolver({"web.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    tool = webfetch_tool(Settings(allow_hosts=("127.0.0.1",), allow_ports=None), resolver=resolver,
                         ssl_context=trusting(ca))
    nx = nexus_factory(tools=[tool])
    result = assert_ok(nx.invoke("webfetch", {"url": f"https://web.test:{tls_site.port}/echo"}))
    assert json.loads(result.output_structured["content"])["Host"] == f"web.test:{tls_site.port}"
    assert tls_site.sni == ["web.test"]
    assert result.metadata["connections"] == [{"host": "web.test", "address": "127.0.0.1"}]
    # the same address under a name the certificate does not carry: refused by the TLS check
    other = assert_error(nx.invoke("webfetch", {"url": f"https://other.test:{tls_site.port}/echo"}))
    assert other.error == "TLS with other.test failed: Hostname mismatch, certificate is not valid for 'other.test'."
    by_address = assert_error(nx.invoke("webfetch", {"url": tls_site.url("/echo")}))
    assert by_address.error.startswith("TLS with 127.0.0.1 failed: IP address mismatch")
    assert [r.path for r in tls_site.requests] == ["/echo"]


def test_https_with_an_untrusted_certificate_fails(nexus_factory: NexusFactory, tls_site: Site) -> None:
    resolver = Resolver({"web.test": ["127.0.0.1"]})
    nx = tool_nexus(nexus_factory, resolver, allow_hosts=("127.0.0.1",))
    result = assert_error(nx.invoke("webfetch", {"url": f"https://web.test:{tls_site.port}/echo"}))
    assert result.error.startswith("TLS with web.test failed: ") and "certificate" in result.error
    assert tls_site.requests == []


# -- the environment -----------------------------------------------------------------------------


def test_proxies_in_the_environment_are_not_used(web: Nexus, site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    # a proxy would resolve and connect itself, past every check: the fetch must go direct
    proxy = Site()
    try:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
            monkeypatch.setenv(name, proxy.url("/"))
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        assert_ok(web.invoke("webfetch", {"url": site.url("/plain")}))
    finally:
        proxy.close()
    assert site.paths() == ["/plain"] and proxy.connections == []

