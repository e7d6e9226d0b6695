"""What webfetch may connect to: the address rules, the hosts' allow- and deny-lists, and the checks
a URL must pass before anything is resolved. Pure functions over `ipaddress`; nothing here touches
the network.

Two kinds of check, both made again on every redirect:
- on the URL (`Policy.check_url`): scheme, credentials, port, the form of the host, denied names;
- on the addresses the host resolves to (`Policy.check_addresses`), made by the network backend
  just before it connects to one of exactly those addresses (see _net.py).
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network
from typing import TYPE_CHECKING

from nexus_core.plugins import SettingError

from ._errors import Refused

if TYPE_CHECKING:  # httpx loads with the tool, not when the plugin's settings are read
    import httpx

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network

#: where the settings live, for messages that tell the user which key changes a rule
SECTION = "plugins.nexus.tool.web"

# IANA's special-purpose registries, most specific first: the first match names the address.
# Written out rather than taken from `ipaddress.is_global`, whose answers differ between Python
# versions and miss some ranges in 3.11 (multicast, 192.0.0.0/24, 64:ff9b::/96 all count as global).
_V4_SPECIAL: list[tuple[IPv4Network, str]] = [(IPv4Network(net), kind) for net, kind in [
    ("0.0.0.0/32", "the unspecified address (connecting to it reaches this machine)"),
    ("0.0.0.0/8", "a 'this network' address"),
    ("10.0.0.0/8", "a private address"),
    ("100.64.0.0/10", "a shared address (carrier-grade NAT)"),
    ("127.0.0.0/8", "a loopback address"),
    ("169.254.0.0/16", "a link-local address"),
    ("172.16.0.0/12", "a private address"),
    ("192.0.0.0/24", "an IETF protocol-assignment address"),
    ("192.0.2.0/24", "a documentation address"),
    ("192.88.99.0/24", "a 6to4 relay address"),
    ("192.168.0.0/16", "a private address"),
    ("198.18.0.0/15", "a benchmarking address"),
    ("198.51.100.0/24", "a documentation address"),
    ("203.0.113.0/24", "a documentation address"),
    ("224.0.0.0/4", "a multicast address"),
    ("255.255.255.255/32", "the broadcast address"),
    ("240.0.0.0/4", "a reserved address"),
]]
_V6_SPECIAL: list[tuple[IPv6Network, str]] = [(IPv6Network(net), kind) for net, kind in [
    ("::/128", "the unspecified address (connecting to it reaches this machine)"),
    ("::1/128", "a loopback address"),
    ("fe80::/10", "a link-local address"),
    ("fec0::/10", "a site-local address"),
    ("fc00::/7", "a unique-local (private) address"),
    ("ff00::/8", "a multicast address"),
    ("64:ff9b:1::/48", "a local-use NAT64 address"),
    ("100::/64", "a discard-only address"),
    ("2001:db8::/32", "a documentation address"),
    ("2001::/23", "an IETF protocol-assignment address (Teredo and others)"),
    ("3fff::/20", "a documentation address"),
]]
_V6_GLOBAL_UNICAST = IPv6Network("2000::/3")
_V6_MAPPED = IPv6Network("::ffff:0:0/96")
_V6_NAT64 = IPv6Network("64:ff9b::/96")

#: instance-metadata services of the clouds (AWS, GCP, Azure, OCI, DigitalOcean; ECS and EKS task
#: credentials; Alibaba; AWS over IPv6): the classic target of a server-side request forgery
CLOUD_METADATA = frozenset(ip_address(a) for a in [
    "169.254.169.254", "169.254.170.2", "169.254.170.23", "100.100.100.200", "192.0.0.192",
    "fd00:ec2::254", "fd00:ec2::23",
])

_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_HOSTNAME = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*\.?$")


def address_kind(addr: IPAddress) -> str | None:
    """Why `addr` is not a public internet address ("a loopback address", ...), or None when it is.

    An IPv6 address that carries an IPv4 one (IPv4-mapped, NAT64, 6to4) is judged by the IPv4
    address it leads to.
    """
    if isinstance(addr, IPv6Address):
        embedded: tuple[str, IPv4Address] | None = None
        if addr in _V6_MAPPED:
            embedded = ("the IPv4-mapped form", IPv4Address(int(addr) & 0xFFFFFFFF))
        elif addr in _V6_NAT64:
            embedded = ("the NAT64 form", IPv4Address(int(addr) & 0xFFFFFFFF))
        elif addr.sixtofour is not None:
            embedded = ("the 6to4 form", addr.sixtofour)
        if embedded is not None:
            inner = address_kind(embedded[1])
            return None if inner is None else f"{embedded[0]} of {embedded[1]}, {inner}"
        kind = next((k for net, k in _V6_SPECIAL if addr in net), None)
        if kind is None and addr not in _V6_GLOBAL_UNICAST:
            kind = "a reserved address (outside the global unicast range 2000::/3)"
    else:
        kind = next((k for net, k in _V4_SPECIAL if addr in net), None)
    if kind is not None and addr in CLOUD_METADATA:
        kind += " (cloud metadata)"
    return kind


def parse_ip(host: str) -> IPAddress | None:
    """`host` as an IP address when it is one written in standard form (IPv6 without brackets)."""
    try:
        return ip_address(host.removeprefix("[").removesuffix("]"))
    except ValueError:
        return None


def nonstandard_ipv4(host: str) -> IPv4Address | None:
    """The address a host such as `2130706433`, `0x7f000001`, `017700000001` or `127.1` means.

    The C resolver reads these as IPv4 addresses (inet_aton's old forms), so a URL can name an
    address without looking like one. None for anything else.
    """
    if not re.fullmatch(r"[0-9a-fA-FxX.]+", host):
        return None
    try:
        packed = socket.inet_aton(host)
    except OSError:
        return None
    addr = IPv4Address(packed)
    return addr if str(addr) != host else None


def normalize_host(host: str) -> str:
    """A host name as it is compared with the lists: lower case, the ASCII (IDNA) form that goes
    on the wire, no trailing dot."""
    import httpx

    raw = httpx.URL(f"http://{host}/").raw_host.decode("ascii")
    return raw.lower().rstrip(".")


@dataclass(frozen=True)
class HostRule:
    """One entry of `allow_hosts` or `deny_hosts`: a host name (`example.com`), every subdomain of
    one (`*.example.com`), an IP address (`10.0.0.5`, `::1`) or a network (`10.0.0.0/8`)."""

    text: str
    name: str | None = None
    subdomains: bool = False
    network: IPNetwork | None = None

    @classmethod
    def parse(cls, text: str) -> HostRule:
        """The rule `text` writes; ValueError saying why when it is none of the four forms."""
        stripped = text.strip()
        try:
            return cls(text, network=ip_network(stripped.removeprefix("[").removesuffix("]"), strict=False))
        except ValueError:
            pass
        subdomains = stripped.startswith("*.")
        candidate = stripped[2:] if subdomains else stripped
        name = ""
        if candidate and not set(candidate) & set("/?#@:[]%\\ "):  # a name, not a URL or host:port
            import httpx

            try:
                name = normalize_host(candidate)
            except (httpx.InvalidURL, ValueError):
                pass
        if not name or not _HOSTNAME.match(name) or nonstandard_ipv4(name) or parse_ip(name):
            hint = " (ports belong in allow_ports)" if re.fullmatch(r"[^:/]+:[0-9]+", candidate) else ""
            raise ValueError(f"{text!r} is not a host name, '*.' and a domain, an IP address or "
                             f"a network (such as 10.0.0.0/8){hint}")
        return cls(text, name=name, subdomains=subdomains)

    def matches_name(self, host: str) -> bool:
        if self.name is None:
            return False
        return host.endswith("." + self.name) if self.subdomains else host == self.name

    def matches_address(self, addr: IPAddress) -> bool:
        if self.network is None:
            return False
        if isinstance(addr, IPv6Address) and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped  # ::ffff:10.0.0.5 is 10.0.0.5 to every rule
        return addr.version == self.network.version and addr in self.network


def _rules(key: str, texts: Iterable[str]) -> tuple[HostRule, ...]:
    rules = []
    for i, text in enumerate(texts):
        try:
            rules.append(HostRule.parse(text))
        except ValueError as exc:
            raise SettingError((key, i), str(exc)) from None
    return tuple(rules)


@dataclass(frozen=True)
class Policy:
    """The rules one Nexus's webfetch applies, built from its settings."""

    allow: tuple[HostRule, ...] = ()
    deny: tuple[HostRule, ...] = ()
    #: the ports a URL may name (its scheme's default when it names none); None: any port
    ports: frozenset[int] | None = frozenset({80, 443})
    #: when set, the only hosts a URL (and every redirect) may name; None: any host
    only: tuple[HostRule, ...] | None = None

    @classmethod
    def build(cls, allow: Iterable[str], deny: Iterable[str], ports: Iterable[int] | None,
              only: Iterable[str] | None = None) -> Policy:
        """Raises SettingError (a ValueError) naming the setting and entry that is not a host,
        address or network (`allow_hosts[1]`)."""
        return cls(
            allow=_rules("allow_hosts", allow),
            deny=_rules("deny_hosts", deny),
            ports=None if ports is None else frozenset(ports),
            only=None if only is None else _rules("only_hosts", only),
        )

    def check_url(self, url: httpx.URL) -> None:
        """Raise Refused for a URL that may not be fetched whatever its host resolves to."""
        if url.scheme not in ("http", "https"):
            what = f"a {url.scheme}: URL" if url.scheme else f"{shown_url(url)!r}, which has no scheme,"
            raise Refused(f"{what} is not fetched; webfetch fetches only http and https URLs")
        if url.userinfo:
            raise Refused(f"{shown_url(url)} carries a user name or password; webfetch sends no credentials, "
                          "so give the URL without them")
        host = url.raw_host.decode("ascii")
        if not host:
            raise Refused(f"{shown_url(url)} names no host")
        port = url.port if url.port is not None else (443 if url.scheme == "https" else 80)
        if not 1 <= port <= 65535:
            raise Refused(f"port {port} of {shown_url(url)} is not a TCP port (1-65535)")
        if self.ports is not None and port not in self.ports:
            allowed = ", ".join(map(str, sorted(self.ports))) or "none"
            raise Refused(f"port {port} is not in {SECTION}.allow_ports ({allowed}); allow it there")
        literal = parse_ip(host)
        if literal is not None:
            if self.only is not None and not any(r.matches_address(literal) for r in self.only):
                raise Refused(f"{literal} is not in {SECTION}.only_hosts")
        else:
            odd = nonstandard_ipv4(host.rstrip("."))
            if odd is not None:
                raise Refused(f"{host} is the IPv4 address {odd} written in a non-standard form; write an "
                              f"address as four decimal numbers ({odd})")
            if not _HOSTNAME.match(host.lower()) or len(host) > 254:
                raise Refused(f"{host!r} is not a valid host name")
            name = host.lower().rstrip(".")
            for rule in self.deny:
                if rule.matches_name(name):
                    raise Refused(f"{name} is in {SECTION}.deny_hosts ({rule.text!r})")
            if self.only is not None and not any(r.matches_name(name) for r in self.only):
                raise Refused(f"{name} is not in {SECTION}.only_hosts")

    def check_addresses(self, host: str, addresses: Sequence[IPAddress]) -> None:
        """Raise Refused unless every address `host` resolved to may be connected to.

        Every one is checked, not only the one used: a name that resolves to a public and a
        private address is refused whichever would have been tried first.
        """
        literal = parse_ip(host)
        name = None if literal is not None else host.lower().rstrip(".")
        for addr in addresses:
            denied = next((r for r in self.deny if r.matches_address(addr)), None)
            where = f"{addr}" if name is None else f"{name} resolves to {addr}, which"
            if denied is not None:
                raise Refused(f"{where} is in {SECTION}.deny_hosts ({denied.text!r})")
            if name is not None and any(r.matches_name(name) for r in self.allow):
                continue
            if any(r.matches_address(addr) for r in self.allow):
                continue
            kind = address_kind(addr)
            if kind is not None:
                what = f"{addr} is {kind}" if name is None else f"{name} resolves to {addr}, {kind}"
                raise Refused(f"{what}; allow it with {SECTION}.allow_hosts")


def shown_url(url: httpx.URL) -> str:
    """A URL for a message, its password (if any) hidden."""
    if url.password:
        return str(url.copy_with(username=url.username, password="***"))
    return str(url)
