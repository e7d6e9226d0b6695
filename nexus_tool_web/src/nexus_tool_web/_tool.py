"""The `webfetch` tool: its schemas, the text the model reads about it, and its handler."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Any

import httpx

from nexus_core import ToolDef, ToolResult, failure

from ._body import is_text_type, parse_content_type
from ._errors import FetchError
from ._fetch import Fetched, Fetcher
from ._net import Resolver, system_resolver
from ._settings import Settings

#: characters of an error page's content shown after `HTTP <status>`
ERROR_BODY_CHARS = 2000

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "url": {"type": "string", "description": "as asked for"},
        "final_url": {"type": "string", "description": "after redirects"},
        "status": {"type": "integer", "description": "2xx (other statuses are errors)"},
        "content_type": {"type": "string", "description": "\"\" when there is none"},
        "content": {"type": "string", "description": "in the format asked for"},
        "truncated": {"type": "boolean", "description": "cut at max_bytes"},
    },
    "required": ["url", "final_url", "status", "content_type", "content", "truncated"],
    "additionalProperties": False,
}


def json_number(value: float) -> int | float:
    """A setting's number as the model should read it: 30, not the 30.0 a float setting holds."""
    return int(value) if float(value).is_integer() else value


def input_schema(settings: Settings) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "url": {"type": "string", "minLength": 1, "maxLength": 8192,
                    "description": "The http:// or https:// URL."},
            "format": {"enum": ["markdown", "text", "html"], "default": "markdown",
                       "description": "How an HTML page comes back; other text comes as it is."},
            "timeout": {"type": "number", "exclusiveMinimum": 0,
                        "maximum": json_number(settings.max_timeout_seconds),
                        "default": json_number(settings.timeout_seconds),
                        "description": "Seconds the whole fetch may take, redirects included."},
            "max_bytes": {"type": "integer", "minimum": 1, "maximum": settings.max_bytes_limit,
                          "default": settings.max_bytes,
                          "description": "Most bytes of the body to read; a longer body is cut (truncated)."},
        },
        "required": ["url"],
        "additionalProperties": False,
    }


def description(settings: Settings) -> str:
    return (
        "Fetch a web page over http or https and return its content: HTML as Markdown (default), plain "
        "text or the HTML itself; other text (JSON, plain text, XML) as it is. Binary content (images, "
        "PDFs, archives) is refused. Redirects are followed (at most "
        f"{settings.max_redirects}). Only public internet addresses are fetched: private, loopback and "
        "link-local addresses are refused unless the configuration allows them. A status other than "
        "2xx is an error that starts with `HTTP <status>` and shows the start of the page."
    )


def code_description(settings: Settings) -> str:
    """What a run_code script reads of webfetch: the facts its arguments' comments do not say
    already (their defaults and limits are there)."""
    return (f"Fetch a URL (the host does: a script may call it). Binary content is refused; at most "
            f"{settings.max_redirects} redirects; private and loopback addresses are refused unless configured. A "
            "status other than 2xx raises ToolFailed (`HTTP <status>` and the page's start).")


def _summary(fetched: Fetched, max_bytes: int) -> str:
    """The text the model reads: the content, with a note for a redirect or a cut."""
    parts = []
    if fetched.redirects:
        parts.append(f"[redirected to {fetched.final_url}]")
    parts.append(fetched.content)
    if fetched.truncated:
        parts.append(f"[truncated: the body is longer than max_bytes={max_bytes}]")
    return "\n\n".join(p for p in parts if p) or "[empty body]"


def _error_page(fetched: Fetched) -> str:
    head = f"HTTP {fetched.status}{f' {fetched.reason}' if fetched.reason else ''} from {fetched.final_url}"
    content = fetched.content.strip()
    if not content:
        media_type = parse_content_type(fetched.content_type)[0]
        return f"{head}\n\n[the body ({media_type}) is not text]" if media_type and not is_text_type(media_type) else head
    if len(content) > ERROR_BODY_CHARS:
        content = content[:ERROR_BODY_CHARS] + f"\n[... {len(content) - ERROR_BODY_CHARS} more characters]"
    return f"{head}\n\n{content}"


def make_handler(fetcher: Fetcher) -> Callable[[dict[str, Any]], ToolResult]:
    settings = fetcher.settings

    def webfetch(arguments: dict[str, Any]) -> ToolResult:
        max_bytes = int(arguments.get("max_bytes", settings.max_bytes))
        try:
            fetched = fetcher.fetch(arguments["url"], arguments.get("format", "markdown"),
                                    float(arguments.get("timeout", settings.timeout_seconds)), max_bytes)
        except FetchError as exc:
            return failure(str(exc))
        # for observers and audits: the path the call took and the addresses it reached
        metadata: dict[str, Any] = {
            "redirects": fetched.redirects,
            "connections": [{"host": host, "address": address} for host, address in fetched.connections],
        }
        if not fetched.ok:
            message = _error_page(fetched)
            return ToolResult(id="", name="", output=message, error=message, error_kind="failure",
                              metadata=metadata)
        return ToolResult(id="", name="", output=_summary(fetched, max_bytes), output_structured=fetched.record(),
                          metadata=metadata)

    return webfetch


def webfetch_tool(settings: Settings | None = None, *, resolver: Resolver | None = None,
                  ssl_context: ssl.SSLContext | None = None) -> ToolDef:
    """The `webfetch` tool, to register on a Nexus yourself (the plugin makes it from the config).

    `resolver(host, port)` returns a host's addresses (default: the system's getaddrinfo); every
    connection uses exactly what it returned, after the checks. `ssl_context` verifies servers
    (default: httpx's, from certifi's CA bundle, or `SSL_CERT_FILE` / `SSL_CERT_DIR` when set).
    Raises ValueError for a settings entry that is not valid.
    """
    settings = settings or Settings()
    context = ssl_context if ssl_context is not None else httpx.create_ssl_context(trust_env=True)
    fetcher = Fetcher(settings, resolver or system_resolver, context)
    return ToolDef(name="webfetch", handler=make_handler(fetcher), description=description(settings),
                   input_schema=input_schema(settings), output_schema=OUTPUT_SCHEMA,
                   annotations={"readOnlyHint": True, "openWorldHint": True},
                   code_description=code_description(settings))
