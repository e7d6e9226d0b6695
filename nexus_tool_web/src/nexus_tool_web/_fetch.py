"""One fetch: the URL checked, redirects followed by hand (each hop checked again), the body read
within its cap and its deadline, and the result or a message that says what stopped it."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpcore
import httpx

from . import _body, _convert
from ._errors import FetchError, Refused
from ._net import Deadline, DeadlineExceeded, GuardedBackend, GuardedTransport, Resolver
from ._policy import SECTION, Policy, shown_url
from ._settings import Settings

REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: the most of an error page's body read to show its start
ERROR_BODY_BYTES = 64 * 1024

_ACCEPT = {
    "markdown": "text/markdown, text/html;q=0.9, text/plain;q=0.8, */*;q=0.1",
    "text": "text/plain, text/html;q=0.9, text/markdown;q=0.8, */*;q=0.1",
    "html": "text/html, application/xhtml+xml, */*;q=0.1",
}


@dataclass
class Fetched:
    """What a fetch got: the output schema's fields, and the path it took."""

    url: str
    final_url: str
    status: int
    reason: str
    content_type: str
    content: str
    truncated: bool
    redirects: list[str] = field(default_factory=list)
    #: (host, address) of every connection made
    connections: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def record(self) -> dict[str, object]:
        return {"url": self.url, "final_url": self.final_url, "status": self.status,
                "content_type": self.content_type, "content": self.content, "truncated": self.truncated}


class Fetcher:
    """Fetches for one Nexus: its settings and rules, the resolver and TLS context it uses."""

    def __init__(self, settings: Settings, resolver: Resolver, ssl_context: ssl.SSLContext) -> None:
        self.settings = settings
        self.policy: Policy = settings.policy()
        self.resolver = resolver
        self.ssl_context = ssl_context

    def fetch(self, url: str, fmt: str, timeout: float, max_bytes: int) -> Fetched:
        """Fetch `url`; raises FetchError (Refused for a rule) with the message for the model."""
        target = _parse_url(url)
        deadline = Deadline(timeout)
        backend = GuardedBackend(self.policy, self.resolver, deadline)
        headers = {"User-Agent": self.settings.user_agent, "Accept": _ACCEPT[fmt],
                   "Accept-Encoding": "gzip, deflate"}
        # trust_env=False: no proxy from the environment (a proxy would resolve names itself,
        # past every check here) and no credentials from ~/.netrc
        with httpx.Client(transport=GuardedTransport(backend, self.ssl_context), trust_env=False,
                          follow_redirects=False, timeout=timeout, headers=headers) as client:
            redirects: list[str] = []
            source: httpx.URL | None = None  # the URL that redirected to `target`
            while True:
                try:
                    self.policy.check_url(target)
                    with _network_errors(target, deadline, "waiting for a response from"):
                        response = client.send(client.build_request("GET", target), stream=True)
                except Refused as exc:
                    raise exc if source is None else exc.on_redirect(len(redirects), shown_url(source)) from None
                try:
                    if response.status_code in REDIRECTS and "location" in response.headers:
                        if len(redirects) >= self.settings.max_redirects:
                            raise Refused(f"{url} redirects more than {self.settings.max_redirects} times "
                                          f"({SECTION}.max_redirects); the last one leads to "
                                          f"{shown_url(_redirect_target(target, response.headers['location']))}")
                        source, target = target, _redirect_target(target, response.headers["location"])
                        redirects.append(shown_url(target))
                        continue
                    with _network_errors(target, deadline, "reading the body of"):
                        fetched = self._read(response, fmt, max_bytes)
                finally:
                    response.close()
                fetched.url, fetched.redirects, fetched.connections = url, redirects, backend.connections
                return fetched

    def _read(self, response: httpx.Response, fmt: str, max_bytes: int) -> Fetched:
        media_type, charset = _body.parse_content_type(response.headers.get("content-type"))
        ok = 200 <= response.status_code < 300
        binary = bool(media_type) and not _body.is_text_type(media_type)
        if binary and ok:
            raise Refused(f"the response is {media_type}, which is not text; webfetch returns text only "
                          "(HTML, Markdown, plain text, JSON, XML, ...)")
        body, truncated = b"", False
        if not binary:
            try:
                coding = _body.decoder_for(response.headers.get("content-encoding"))
            except Refused:
                if ok:
                    raise
                binary = True  # an error page in a coding it did not ask for: the status says enough
        if not binary:
            body, truncated = _body.read_capped(response.iter_raw(), coding,
                                                max_bytes if ok else min(max_bytes, ERROR_BODY_BYTES))
        response.close()  # all that is wanted is read: let the connection go before converting
        if _body.looks_binary(body[:4096]):
            if ok:
                raise Refused(f"the response{f' (declared {media_type})' if media_type else ''} holds "
                              "binary data; webfetch returns text only")
            body = b""
        if not media_type and body:
            media_type = "text/html" if _body.looks_like_html(body) else "text/plain"
        return Fetched(
            url="", final_url=shown_url(response.request.url), status=response.status_code,
            reason=response.reason_phrase, content_type=response.headers.get("content-type", ""),
            content=_render(body, media_type, charset, fmt), truncated=truncated,
        )


def _render(body: bytes, media_type: str, charset: str | None, fmt: str) -> str:
    if media_type not in _body.HTML_TYPES:
        return _convert.decode_text(body, charset)  # text that is not HTML reads the same in every format
    html = _convert.decode_html(body, charset)
    if fmt == "html":
        return html
    return _convert.html_to_markdown(html) if fmt == "markdown" else _convert.html_to_text(html)


def _parse_url(text: str) -> httpx.URL:
    try:
        url = httpx.URL(text.strip())
    except (httpx.InvalidURL, ValueError) as exc:
        raise FetchError(f"invalid URL {text!r}: {exc}") from None
    if not url.scheme and not url.host:
        raise FetchError(f"{text!r} is not a full URL: give its scheme too, such as https://{text.strip()}")
    return url


def _redirect_target(current: httpx.URL, location: str) -> httpx.URL:
    try:
        return current.join(location.strip())
    except (httpx.InvalidURL, ValueError) as exc:
        raise FetchError(f"{shown_url(current)} redirects to {location!r}, which is not a valid URL: {exc}") from None


@contextmanager
def _network_errors(url: httpx.URL, deadline: Deadline, doing: str) -> Iterator[None]:
    """Turn what the network layers raise into a FetchError whose message names the URL."""
    shown = shown_url(url)
    host = url.host
    try:
        yield
    except FetchError:
        raise
    except DeadlineExceeded as exc:
        raise FetchError(f"timed out after {deadline.seconds:g} s {exc.doing or doing + ' ' + shown}") from exc
    except httpcore.TimeoutException as exc:
        raise FetchError(f"timed out after {deadline.seconds:g} s {doing} {shown}") from exc
    except httpcore.ConnectError as exc:
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, ssl.SSLError):
            reason = getattr(cause, "verify_message", None) or getattr(cause, "reason", None) or cause
            raise FetchError(f"TLS with {host} failed: {reason}") from exc
        raise FetchError(f"cannot connect to {host}: {exc}") from exc
    except httpcore.RemoteProtocolError as exc:
        if "buffer too long" in str(exc):  # h11's words for headers past httpcore's 100 KiB cap
            raise FetchError(f"{host} sent more than 100 KiB of response headers; webfetch stops reading "
                             "there") from exc
        raise FetchError(f"{host} sent a response that breaks HTTP/1.1: {exc}") from exc
    except (httpcore.NetworkError, httpcore.ProtocolError) as exc:
        if deadline.expired:
            raise FetchError(f"timed out after {deadline.seconds:g} s {doing} {shown}") from exc
        raise FetchError(f"the connection to {host} failed {doing.split()[0]} {shown}: {exc}") from exc
    except httpx.HTTPError as exc:
        raise FetchError(f"fetching {shown} failed: {exc}") from exc
