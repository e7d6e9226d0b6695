"""Turning a body into the text the model reads: decoding its charset, and HTML into Markdown or
plain text.

Both HTML conversions start from one parse by BeautifulSoup (its `html.parser` tree builder,
which needs no compiled parser and, unlike libxml2, keeps content however deeply it nests).
Markdown comes from markdownify, which walks that tree. Plain text is the tree's strings, with
line breaks where block elements begin and end.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from bs4 import BeautifulSoup, CData, NavigableString, Tag, UnicodeDammit
from markdownify import MarkdownConverter

#: elements whose content is not page text
_DROP = frozenset({"script", "style", "noscript", "template", "iframe", "object", "embed", "canvas", "svg",
                   "math"})

#: elements that start a new line in plain text, and those that leave a blank line around them
_BLOCKS = frozenset({
    "address", "article", "aside", "body", "caption", "dd", "details", "dialog", "div", "dl", "dt",
    "fieldset", "figcaption", "figure", "footer", "form", "header", "hgroup", "hr", "html", "legend", "li",
    "main", "menu", "nav", "section", "summary", "tbody", "tfoot", "thead", "title", "tr",
})
_PARAGRAPHS = frozenset({"blockquote", "h1", "h2", "h3", "h4", "h5", "h6", "ol", "p", "pre", "table", "ul"})
_KEEP_WHITESPACE = frozenset({"pre", "textarea", "listing", "plaintext", "xmp"})

#: conversions running at once. Parsing is pure Python, so more of them at once only share one
#: CPU (the GIL) while each holds its page's tree (up to ~200 bytes per byte of hostile HTML).
_CONVERSIONS = threading.BoundedSemaphore(2)

DEEP_NOTE = ("[this page nests its elements too deeply to convert to Markdown (a limit of Python's "
             "recursion); its plain text follows]\n\n")


def decode_text(body: bytes, charset: str | None) -> str:
    """A text body as a string: its declared charset (a byte-order mark wins), else UTF-8; bytes
    that do not decode become U+FFFD."""
    for bom, codec in ((b"\xef\xbb\xbf", "utf-8-sig"), (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16")):
        if body.startswith(bom):
            return body.decode(codec, "replace")
    try:
        return body.decode(charset or "utf-8", "replace")
    except LookupError:  # a charset Python does not know
        return body.decode("utf-8", "replace")


def decode_html(body: bytes, charset: str | None) -> str:
    """An HTML body as a string: the header's charset, else a byte-order mark or the document's
    own <meta charset>, else a guess (bs4's UnicodeDammit)."""
    dammit = UnicodeDammit(body, known_definite_encodings=[charset] if charset else [], is_html=True)
    text = dammit.unicode_markup
    return text if text is not None else body.decode("utf-8", "replace")


class _Converter(MarkdownConverter):
    """markdownify with ATX headings ("# Title"), without what is not page text, and without
    inline image data: an <img> whose src is a data: URI would put kilobytes of base64 in front of
    the model."""

    def __init__(self) -> None:
        super().__init__(heading_style="ATX", bullets="-")

    def convert_img(self, el: Any, text: str, parent_tags: Any) -> str:
        if str(el.attrs.get("src", "")).strip().lower().startswith("data:"):
            return str(el.attrs.get("alt", "") or "")
        # looked up by hand: markdownify's stubs do not declare its convert_* methods
        return str(vars(MarkdownConverter)["convert_img"](self, el, text, parent_tags))

    def convert_head(self, el: Any, text: str, parent_tags: Any) -> str:
        title = el.find("title")
        return f"{title.get_text().strip()}\n\n" if title is not None else ""

    def _dropped(self, el: Any, text: str, parent_tags: Any) -> str:
        return ""

    convert_noscript = convert_template = convert_iframe = convert_object = convert_embed = _dropped
    convert_canvas = convert_svg = convert_math = _dropped


def _soup(html: str) -> BeautifulSoup:
    # parsed once and never changed: bs4's insertions and removals walk to an element's last
    # descendant, which on a hostile page nested 100,000 deep makes them quadratic
    return BeautifulSoup(html.replace("\x00", "\ufffd"), "html.parser")


def html_to_markdown(html: str) -> str:
    with _CONVERSIONS:
        soup = _soup(html)
        try:
            markdown = _Converter().convert_soup(soup)
        except RecursionError:
            return DEEP_NOTE + _text_of(soup)
    return _tidy(markdown)


def html_to_text(html: str) -> str:
    with _CONVERSIONS:
        return _text_of(_soup(html))


class _End:
    """Where an element's content ends, in the walk of `_text_of`."""

    __slots__ = ("mark",)

    def __init__(self, mark: str) -> None:
        self.mark = mark


_LINE, _BLANK = "\x01", "\x02"  # a line break, a blank line: at a boundary, the larger one wins


def _text_of(soup: BeautifulSoup) -> str:
    """The page's text as a browser lays it out, roughly: whitespace collapsed, a line break at
    each block element's start and end (a blank line around paragraphs, headings, lists, tables),
    a tab after a table cell, and preformatted text as it is. The tree is walked with a stack, so
    any depth is fine."""
    out: list[str] = []
    kept: list[str] = []  # preformatted texts, put back after the whitespace is tidied
    stack: list[Any] = [soup]
    while stack:
        node = stack.pop()
        if isinstance(node, _End):
            out.append(node.mark)
        elif isinstance(node, NavigableString):
            if type(node) is NavigableString or isinstance(node, CData):
                out.append(re.sub(r"\s+", " ", str(node)))
        elif isinstance(node, Tag) and node.name not in _DROP:
            if node.name == "br":
                out.append("\n")
            elif node.name in _KEEP_WHITESPACE:
                kept.append(node.get_text().strip("\n"))
                out.append(f"{_BLANK}\x00{len(kept) - 1}\x00{_BLANK}")
            else:
                mark = _BLANK if node.name in _PARAGRAPHS else _LINE if node.name in _BLOCKS else ""
                end = "\t" if node.name in ("td", "th") else mark
                out.append(mark)
                if end:
                    stack.append(_End(end))
                stack.extend(reversed(node.contents))
    text = "".join(out)
    # a run of spaces and boundaries becomes the largest break in it; lines lose their edges
    text = re.sub(r"[ \t]*[\x01\x02][\x01\x02 \t]*",
                  lambda m: "\n\n" if _BLANK in m.group() else "\n", text)
    text = "\n".join(line.strip(" ") for line in text.split("\n"))
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    return re.sub("\x00([0-9]+)\x00", lambda m: kept[int(m.group(1))], text)


def _tidy(markdown: str) -> str:
    """markdownify's output without trailing spaces on lines or runs of blank lines."""
    lines = [line.rstrip() for line in markdown.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")
