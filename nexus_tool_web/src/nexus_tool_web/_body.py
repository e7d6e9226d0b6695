"""A response body: is it text, how is it compressed, and reading it within a cap.

The cap holds while streaming, on both sides of decompression: at most `max_bytes` of compressed
input are read from the network, and decompression is asked for at most one piece of output at a
time, so a gzip bomb (a few hundred kilobytes that inflate to gigabytes) never holds more than
`max_bytes` plus one piece in memory. httpx's own decoders inflate a whole network chunk at once,
up to about a thousand times its size; that is why the raw stream is decoded here with zlib's
`max_length`.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from email.message import Message

from ._errors import FetchError, Refused

#: the most decompressed output asked of zlib in one step
PIECE = 64 * 1024

#: media types outside text/* whose bodies are text
_TEXT_APPLICATION = frozenset({
    "application/json", "application/xml", "application/xhtml+xml", "application/javascript",
    "application/ecmascript", "application/x-javascript", "application/yaml", "application/x-yaml",
    "application/toml", "application/x-sh", "application/sql", "application/graphql",
    "application/x-www-form-urlencoded", "application/x-ndjson", "application/csv",
})
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})

_BOMS = (b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")


def parse_content_type(header: str | None) -> tuple[str, str | None]:
    """(media type in lower case, charset or None) from a Content-Type header ("" when absent)."""
    if not header:
        return "", None
    message = Message()
    message["content-type"] = header
    charset = message.get_param("charset")
    return message.get_content_type().lower(), charset if isinstance(charset, str) and charset else None


def is_text_type(media_type: str) -> bool:
    if media_type.startswith("text/") or media_type in _TEXT_APPLICATION:
        return True
    return media_type.endswith(("+json", "+xml", "+yaml"))  # application/ld+json, image/svg+xml, ...


def looks_binary(sample: bytes) -> bool:
    """Whether the start of a body is binary data: NUL bytes, which text (but UTF-16) never has."""
    return b"\x00" in sample and not sample.startswith(_BOMS[1:])


def looks_like_html(sample: bytes) -> bool:
    start = sample[:512].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    return start.startswith((b"<!doctype html", b"<html", b"<head", b"<body"))


def content_encodings(header: str | None) -> list[str]:
    """The codings of a Content-Encoding header, first applied first, without `identity`."""
    codings = [c.strip().lower() for c in (header or "").split(",")]
    return [c for c in codings if c and c != "identity"]


def decoder_for(header: str | None) -> str | None:
    """The one supported coding of a response (None: none), or Refused naming what is not."""
    codings = content_encodings(header)
    if not codings:
        return None
    if len(codings) > 1:
        raise Refused(f"the response is compressed more than once ({', '.join(codings)}); webfetch decodes "
                      "one layer of gzip or deflate")
    if codings[0] not in ("gzip", "x-gzip", "deflate"):
        raise Refused(f"the response is compressed with {codings[0]}, which webfetch did not ask for "
                      "(it accepts gzip and deflate)")
    return codings[0]


def _inflate(chunks: Iterable[bytes], coding: str) -> Iterator[bytes]:
    """Decompress gzip (every member of a multi-member stream) or deflate (zlib-wrapped or raw),
    yielding at most PIECE bytes at a time however much one input chunk inflates to."""
    gzip = coding in ("gzip", "x-gzip")
    wbits = 16 + zlib.MAX_WBITS if gzip else zlib.MAX_WBITS
    inflater = zlib.decompressobj(wbits)
    started = False
    for chunk in chunks:
        data = chunk
        while data:
            try:
                out = inflater.decompress(data, PIECE)
            except zlib.error:
                if gzip or started:
                    raise
                # "deflate" servers often send a raw deflate stream, without the zlib wrapper
                wbits = -zlib.MAX_WBITS
                inflater = zlib.decompressobj(wbits)
                out = inflater.decompress(data, PIECE)
            started = True
            data = inflater.unconsumed_tail
            if out:
                yield out
            if inflater.eof:
                data = inflater.unused_data
                if not gzip or (data and not data.strip(b"\x00")):
                    return  # what follows the end (of a deflate stream, or padding) is not body
                inflater = zlib.decompressobj(wbits)  # the next gzip member
    while started and not inflater.eof:
        out = inflater.flush(PIECE)
        if not out:
            break
        yield out


def read_capped(raw: Iterable[bytes], coding: str | None, max_bytes: int) -> tuple[bytes, bool]:
    """Read a body of at most `max_bytes` (after decompression) from the raw network chunks.

    Returns (body, truncated). Reading stops as soon as the cap is passed, on either side of
    decompression, and the caller closes the response, which drops the connection.
    """
    counted = _count_raw(raw, max_bytes)
    pieces: Iterable[bytes] = counted if coding is None else _inflate(counted, coding)
    body = bytearray()
    try:
        for piece in pieces:
            room = max_bytes - len(body)
            if len(piece) > room:
                body += piece[:room]
                return bytes(body), True
            body += piece
    except zlib.error as exc:
        raise FetchError(f"the response's {coding} data is corrupt: {exc}") from None
    except _RawCapReached:
        return bytes(body), True
    return bytes(body), False


class _RawCapReached(Exception):
    pass


def _count_raw(raw: Iterable[bytes], max_bytes: int) -> Iterator[bytes]:
    """The raw chunks, stopping once more than max_bytes (plus one piece of slack for a
    compressor's overhead) have come: compressed data that inflates to little or nothing must not
    be read forever."""
    limit = max_bytes + PIECE
    seen = 0
    for chunk in raw:
        seen += len(chunk)
        yield chunk
        if seen > limit:
            raise _RawCapReached()
