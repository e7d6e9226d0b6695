"""Content blocks: a tool result as more than one piece of text.

A `ToolResult` carries its text in `output`. A result that has more (an image a tool drew, the
pages of a PDF, what an MCP server sent back: text, images, audio and embedded resources, in
order) also carries it as `content`, a tuple of these blocks; the adapters turn each block into
the provider's own image, document or text content (see docs/adapters.md).

The shapes follow MCP's content blocks, the richest of the four formats: binary data is base64
text (as on every provider's wire), and each block is a frozen attrs class that the core's
cattrs converter writes as `{"type": "text" | "image" | "audio" | "resource", ...}`.
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs


def _base64(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None and attribute.name == "blob":
        return
    if not isinstance(value, str):
        raise TypeError(f"{type(instance).__name__}.{attribute.name} must be base64 text (str), "
                        f"not {type(value).__name__}: use {type(instance).__name__}.from_bytes() for raw bytes")
    try:
        binascii.a2b_base64(value, strict_mode=True)
    except binascii.Error as exc:
        raise ValueError(f"{type(instance).__name__}.{attribute.name} is not valid base64: {exc}") from None


def _mime_type(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None and attribute.name == "mime_type" and isinstance(instance, ResourceContent):
        return
    if not isinstance(value, str) or "/" not in value.strip("/"):
        raise ValueError(f"{type(instance).__name__}.{attribute.name} must be a MIME type such as "
                         f"'image/png', got {value!r}")


@attrs.frozen
class TextContent:
    """A piece of text."""

    text: str = attrs.field(validator=attrs.validators.instance_of(str))


@attrs.frozen
class ImageContent:
    """An image: base64 `data` of the given `mime_type` (e.g. "image/png")."""

    data: str = attrs.field(validator=_base64, repr=lambda d: f"<{len(d)} base64 chars>")
    mime_type: str = attrs.field(validator=_mime_type)

    @classmethod
    def from_bytes(cls, data: bytes, mime_type: str) -> ImageContent:
        return cls(data=base64.b64encode(data).decode("ascii"), mime_type=mime_type)

    def to_bytes(self) -> bytes:
        return base64.b64decode(self.data)


@attrs.frozen
class AudioContent:
    """Audio: base64 `data` of the given `mime_type` (e.g. "audio/wav")."""

    data: str = attrs.field(validator=_base64, repr=lambda d: f"<{len(d)} base64 chars>")
    mime_type: str = attrs.field(validator=_mime_type)

    @classmethod
    def from_bytes(cls, data: bytes, mime_type: str) -> AudioContent:
        return cls(data=base64.b64encode(data).decode("ascii"), mime_type=mime_type)

    def to_bytes(self) -> bytes:
        return base64.b64decode(self.data)


@attrs.frozen
class ResourceContent:
    """A resource (a document, a file) identified by `uri`: embedded as `text`, or as base64
    `blob` for binary content (a PDF, say), or neither, a link the model can only read about
    (MCP's resource_link). `name` is a short label (a file name)."""

    uri: str = attrs.field(validator=attrs.validators.instance_of(str))
    mime_type: str | None = attrs.field(default=None, validator=_mime_type)
    text: str | None = attrs.field(default=None, validator=attrs.validators.optional(attrs.validators.instance_of(str)))
    blob: str | None = attrs.field(default=None, validator=_base64, repr=lambda d: "None" if d is None else f"<{len(d)} base64 chars>")
    name: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.text is not None and self.blob is not None:
            raise ValueError(f"ResourceContent {self.uri!r}: give text or blob, not both")

    @classmethod
    def from_bytes(cls, uri: str, data: bytes, mime_type: str, name: str | None = None) -> ResourceContent:
        return cls(uri=uri, mime_type=mime_type, blob=base64.b64encode(data).decode("ascii"), name=name)

    def to_bytes(self) -> bytes:
        """The content as bytes: the decoded blob, or the text as UTF-8 (empty for a link)."""
        if self.blob is not None:
            return base64.b64decode(self.blob)
        return (self.text or "").encode("utf-8")


#: Any content block.
Content = TextContent | ImageContent | AudioContent | ResourceContent
CONTENT_TYPES: tuple[type, ...] = (TextContent, ImageContent, AudioContent, ResourceContent)
#: the `type` each block has in JSON (the core's converter and MCP use the same names)
CONTENT_TAGS: dict[type, str] = {TextContent: "text", ImageContent: "image", AudioContent: "audio",
                                 ResourceContent: "resource"}


def is_content(value: Any) -> bool:
    return isinstance(value, CONTENT_TYPES)


def _size(data: str) -> str:
    n = len(data) * 3 // 4 - (len(data) - len(data.rstrip("=")))  # the decoded size, without decoding
    if n < 1024:
        return f"{n} bytes"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} kB"
    return f"{n / (1024 * 1024):.1f} MB"


def describe(block: Content) -> str:
    """One line naming a non-text block, for a reader that gets text only."""
    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, ImageContent):
        return f"[image: {block.mime_type}, {_size(block.data)}]"
    if isinstance(block, AudioContent):
        return f"[audio: {block.mime_type}, {_size(block.data)}]"
    kind = block.mime_type or "unknown type"
    if block.blob is not None:
        return f"[resource {block.uri}: {kind}, {_size(block.blob)}]"
    if block.text is not None:
        return f"[resource {block.uri}: {kind}]"
    return f"[resource link {block.uri}: {kind}]"


def content_text(blocks: Iterable[Content]) -> str:
    """The text form of some blocks: text as it is (a text resource's text under its name),
    a line such as `[image: image/png, 2.1 kB]` for each other block; one block per line."""
    lines = []
    for block in blocks:
        if isinstance(block, ResourceContent) and block.text is not None:
            lines.append(f"{describe(block)}\n{block.text}")
        else:
            lines.append(describe(block))
    return "\n".join(lines)


#: what the adapters read of an `output_file` at most; a bigger file is named, not sent
MAX_FILE_BYTES = 20 * 1024 * 1024


def file_content(path: str, max_bytes: int = MAX_FILE_BYTES) -> Content:
    """A file as a block: an image as `ImageContent`, audio as `AudioContent`, anything else as
    an embedded `ResourceContent` (text for text files, base64 for the rest). A file that cannot
    be read, is not a regular file, or is bigger than `max_bytes` (0 sends no file at all)
    becomes a `TextContent` saying so: formatting a result never fails on the file it names."""
    file = Path(path)
    mime, _ = mimetypes.guess_type(file.name)
    mime = mime or "application/octet-stream"
    try:
        # non-blocking, and checked on the open file: a FIFO or a device named here must not
        # hang or flood the host, nor a path swapped for one between a check and the open
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as fh:
            status = os.fstat(fh.fileno())
            if not stat.S_ISREG(status.st_mode):
                return TextContent(f"[output_file {path}: not a regular file, not sent]")
            if status.st_size > max_bytes:
                return TextContent(f"[output_file {path}: {mime}, {status.st_size} bytes, "
                                   f"not sent (over {max_bytes} bytes)]")
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        return TextContent(f"[output_file {path}: cannot be read ({exc.strerror or exc})]")
    if len(data) > max_bytes:  # it grew since fstat()
        return TextContent(f"[output_file {path}: {mime}, over {max_bytes} bytes, not sent]")
    uri = file.absolute().as_uri()
    if mime.startswith("image/"):
        return ImageContent.from_bytes(data, mime)
    if mime.startswith("audio/"):
        return AudioContent.from_bytes(data, mime)
    if mime.startswith("text/") or mime in ("application/json", "application/xml"):
        try:
            return ResourceContent(uri=uri, mime_type=mime, text=data.decode("utf-8"), name=file.name)
        except UnicodeDecodeError:
            pass
    return ResourceContent.from_bytes(uri, data, mime, name=file.name)
