"""Content blocks: a tool result as more than text (images, audio, documents, MCP resources).

A handler returns a block, or a list of them, and the result carries them in `content` with
their text form in `output`; the adapters send each as the provider's own image, document or
text part (docs/adapters.md). `file_content(path)` reads a file as the block its type calls for.
"""

from ._content import (
    AudioContent,
    Content,
    ImageContent,
    ResourceContent,
    TextContent,
    content_text,
    file_content,
    is_content,
)

__all__ = [
    "AudioContent",
    "Content",
    "ImageContent",
    "ResourceContent",
    "TextContent",
    "content_text",
    "file_content",
    "is_content",
]
