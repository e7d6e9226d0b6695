"""What Nexus shows a person at a terminal, made so that it cannot be forged or hidden.

Text on a terminal is code for the terminal: `ESC[1A ESC[2K` moves up and erases a line (a
model's text can redraw the question above it), OSC 52 writes the clipboard, a carriage return
overwrites what a line showed, and Unicode bidi controls (U+202E) make text read in another order
than it runs. Every front end puts what it prints through this module:

- `escape(text)` makes each such character visible as an escape (`\\x1b`, `\\u202e`): C0 and C1
  controls (so every ESC, CSI and OSC sequence is inert), DEL, carriage returns, bidi controls
  and the other invisible format characters (zero-width spaces, the BOM, tag characters, variation
  selectors past the emoji ones, Hangul fillers), line and paragraph separators and lone
  surrogates. Newlines and tabs stay in multi-line text.
- `render_question(question)` is the text a person is asked: for an approval, the whole call
  (long values folded with a count of what is folded; `full=True` shows everything), the
  `approval_note` of its tool, the gates' questions and where the call comes from (a direct
  call, or which run_code call and which line of its script, the script shown whole).
- `render_call(call)` is one line for a log of calls: the name and the arguments as JSON,
  cut with a count of what is cut.
- `protect(stream)` wraps a text stream that is a terminal so that everything written to it
  is escaped (the `nexus` command line does this to stdout and stderr when they are terminals).
- `discard_typed_ahead(stream)` drops keys typed on a terminal before a question is shown, so
  only keys typed after it answer it.

The durable `nexus approvals` listing and MCP elicitation texts use the same functions, so every
front end shows one call the same way.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Container, Iterable
from typing import IO, TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from ._models import Question, ToolCall, ToolDef

__all__ = ["Rendered", "discard_typed_ahead", "escape", "protect", "render_call", "render_question"]

# Every character `escape` rewrites, by code point (kept in step with the running Python's
# Unicode data by tests/core/test_terminal.py): C0 but newline and tab (handled by mode), DEL
# and C1; the soft hyphen; Arabic and Syriac format marks; the Mongolian vowel separator and
# free variation selectors; zero-width space/joiners, LRM/RLM; line and paragraph separators;
# bidi embeddings, overrides (U+202A-E) and isolates (U+2066-9); word joiner and invisible
# operators; the BOM; interlinear annotations; Egyptian hieroglyph format controls; shorthand
# and musical format controls; the combining grapheme joiner and Khmer inherent vowels (both
# invisible); Hangul fillers (blank letters); variation selectors 1-14 (15 and 16 pick text or
# emoji presentation and stay); tag characters and the variation selectors supplement; lone
# surrogates (from bytes decoded with surrogateescape).
_INVISIBLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2"
    "\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0d"
    "\ufeff\uffa0\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0000-\U000e0fff\ud800-\udfff]"
)
_NEWLINE_OR_TAB = re.compile("[\n\t]")
_ZWJ = "\u200d"


_SHORT = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _code(ch: str) -> str:
    if ch in _SHORT:
        return _SHORT[ch]
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def _joins_emoji(text: str, at: int) -> bool:
    """A zero-width joiner between two pictographs (👩‍💻) is part of one emoji, not a disguise."""
    if at == 0 or at + 1 >= len(text):
        return False
    before, after = text[at - 1], text[at + 1]
    if before in "\ufe0f" or 0x1F3FB <= ord(before) <= 0x1F3FF:  # emoji presentation, skin tones
        before = text[at - 2] if at >= 2 else ""
    return unicodedata.category(before or " ") == "So" and unicodedata.category(after) == "So"


def escape(text: str, *, multiline: bool = True) -> str:
    """`text` with every character that could act on a terminal, or hide or reorder what it
    shows, written as a visible escape (`\\x1b[2K` shows as those five characters, U+202E as
    `\\u202e`). With `multiline` (the default) newlines and tabs stay and `\\r\\n` is a newline;
    without, they are escaped too, for text that must stay on one line (a label, an option).
    A string that went through it once is unchanged by a second pass."""
    if multiline:
        if "\r" in text:
            text = text.replace("\r\n", "\n")
    elif _NEWLINE_OR_TAB.search(text):
        text = _NEWLINE_OR_TAB.sub(lambda m: _code(m.group()), text)
    if text.isascii() and text.isprintable():
        return text

    def visible(match: re.Match[str]) -> str:
        ch = match.group()
        if ch == _ZWJ and _joins_emoji(match.string, match.start()):
            return ch
        return _code(ch)

    return _INVISIBLE.sub(visible, text)


# -- questions --------------------------------------------------------------------------------

#: a value longer than this (characters or lines) is folded, unless `full`; a script never is
FOLD_CHARS = 2000
FOLD_LINES = 40
#: what a folded value keeps: its head and its tail (where an appended command would be)
_HEAD_CHARS, _TAIL_CHARS = 1200, 600
_HEAD_LINES, _TAIL_LINES = 24, 12
#: a run of spaces this long, in a one-line value, is shown as a count (`[300 spaces]`), so a
#: command cannot push its end past what a person reads
_SPACE_RUN = re.compile(r" {16,}")
_SPACES_AFTER_TEXT = re.compile(r"(?<=\S) {16,}")


def _spaces(match: re.Match[str]) -> str:
    return f"[{len(match.group())} spaces]"
#: the arguments a call shows one per line before the rest are folded
_MAX_KEYS = 50
#: the longest one-line form of a call's arguments shown beside its name
_INLINE = 100
#: the argument that holds a run_code script (the seam: an inner call's parent holds its
#: script there, and `metadata["script_line"]` on the inner call names the line)
SCRIPT_ARGUMENT = "script"
SCRIPT_LINE = "script_line"
#: lines of a script already shown whole that a later question about it shows around the line
_CONTEXT_LINES = 3


class Rendered(NamedTuple):
    """The text of a question as a front end shows it (every line escaped) and how many pieces
    of it were folded (0: it is whole; else `render_question(..., full=True)` shows them)."""

    text: str
    folded: int = 0


class _Writer:
    def __init__(self, full: bool) -> None:
        self.full = full
        self.lines: list[str] = []
        self.folded = 0

    def add(self, line: str) -> None:
        self.lines.append(line)

    def block(self, text: str, indent: str, *, numbered: bool = False, mark: int | None = None,
              never_fold: bool = False) -> None:
        """Multi-line text, one gutter per line; folded (head, count, tail) when long."""
        raw = whole = escape(text).split("\n")
        width = len(str(len(raw)))
        if not self.full:
            # a run of spaces after a line's indentation shows as its count; a line too long to
            # read keeps its head and tail (a script's lines too: it is shown whole, not unread)
            raw = [_SPACES_AFTER_TEXT.sub(_spaces, line) for line in raw]
            if not never_fold:
                raw = [self.cut(line) for line in raw]

        def gutter(i: int, line: str) -> str:
            return f"{'>' if i == mark else ' '} {i:>{width}} | {line}" if numbered else f"| {line}"

        shown = [gutter(i, line) for i, line in enumerate(raw, 1)]
        if not self.full and not never_fold and (len(raw) > FOLD_LINES or len(text) > FOLD_CHARS):
            head, tail = _head_tail(raw)
            hidden = raw[len(head):len(raw) - len(tail)]
            self.folded += 1
            # the count is of the text's own characters (newlines included), not the gutters'
            characters = sum(len(line) + 1 for line in whole[len(head):len(raw) - len(tail)])
            marker = f"[... {_count(characters, 'character')} in {_count(len(hidden), 'line')} folded ...]"
            shown = [*shown[:len(head)], marker, *shown[len(raw) - len(tail):]]
        self.lines.extend(indent + line for line in shown)

    def value(self, text: str, indent: str, label: str) -> None:
        """One argument: `label: value` on a line, or the label and the value as a block."""
        if "\n" in text:
            self.add(f"{indent}{label}:")
            self.block(text, indent + "  ")
            return
        shown = escape(text, multiline=False)
        if not self.full:
            shown = self.cut(_SPACE_RUN.sub(_spaces, shown))
        self.add(f"{indent}{label}: {shown}")

    def cut(self, line: str) -> str:
        """A line longer than FOLD_CHARS as its head, a count of what is folded, and its tail."""
        if len(line) <= FOLD_CHARS:
            return line
        self.folded += 1
        cut = len(line) - _HEAD_CHARS - _TAIL_CHARS
        return f"{line[:_HEAD_CHARS]}[... {_count(cut, 'character')} folded ...]{line[-_TAIL_CHARS:]}"


def _head_tail(lines: list[str]) -> tuple[list[str], list[str]]:
    head = lines[:_HEAD_LINES]
    while sum(len(h) for h in head) > _HEAD_CHARS and len(head) > 1:
        head.pop()
    tail = lines[-_TAIL_LINES:]
    while sum(len(t) for t in tail) > _TAIL_CHARS and len(tail) > 1:
        tail.pop(0)
    return head, tail


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"


def _json(value: Any, indent: int | None = None) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, indent=indent, default=repr,
                          separators=None if indent else (", ", ": "))
    except (TypeError, ValueError, RecursionError):
        return repr(value)


def _arguments(w: _Writer, call: ToolCall, indent: str) -> None:
    arguments = call.arguments if isinstance(call.arguments, dict) else {"(arguments)": call.arguments}
    keys = list(arguments)
    shown = keys if w.full else keys[:_MAX_KEYS]
    for key in shown:
        value = arguments[key]
        label = escape(str(key), multiline=False)
        if key == SCRIPT_ARGUMENT and isinstance(value, str):
            w.add(f"{indent}{label}: (the whole script)")
            w.block("\n".join(_script_lines(value)), indent + "  ", numbered=True, never_fold=True)
        elif isinstance(value, str):
            w.value(value, indent, label)
        else:
            compact = _json(value)
            if len(compact) <= _INLINE:
                w.value(compact, indent, label)
            else:
                w.value(_json(value, indent=2), indent, label)
    if len(shown) < len(keys):
        w.folded += 1
        w.add(f"{indent}[... {_count(len(keys) - len(shown), 'more argument')} folded ...]")
    if not keys:
        w.add(f"{indent}(no arguments)")


def _inline(call: ToolCall) -> str | None:
    """The arguments as one short line of JSON, when they fit beside the name and hide nothing
    (no newline in a value, no run of spaces), else None."""
    text = _json(call.arguments)
    if len(text) > _INLINE or _SPACE_RUN.search(text) or "\\n" in text:
        return None
    return escape(text, multiline=False)


def _called(call: ToolCall, tool: ToolDef | None) -> str:
    name = escape(call.name, multiline=False)
    if tool is not None and tool.name != call.name:
        return f"{escape(tool.name, multiline=False)} (called as {name})"
    return name


def _script_line(call: ToolCall) -> int | None:
    line = call.metadata.get(SCRIPT_LINE) if isinstance(call.metadata, dict) else None
    return line if type(line) is int else None


def _script(call: ToolCall) -> str | None:
    script = call.arguments.get(SCRIPT_ARGUMENT) if isinstance(call.arguments, dict) else None
    return script if isinstance(script, str) else None


def _origin(w: _Writer, call: ToolCall, chain: tuple[ToolCall, ...], shown_scripts: Container[str]) -> None:
    """Where the call comes from: a direct call, or the calls it comes through (innermost
    first, each with the line of its script that made the next), then the script nearest the
    call, whole, the line that made the call marked."""
    if not chain:
        w.add("  from: a direct call, not from a script")
        return
    script: tuple[ToolCall, str, int | None] | None = None
    child = call
    for parent in reversed(chain):
        line, text = _script_line(child), _script(parent)
        where = f", line {line} of its script" if line is not None and text is not None else ""
        word = "from" if child is call else "through"
        w.add(f"  {word}: {escape(parent.name, multiline=False)} call {escape(parent.id, multiline=False)}{where}")
        if text is not None and script is None:
            script = (parent, text, line)
        child = parent
    if script is None:
        return
    parent, text, mark = script
    lines = _script_lines(text)
    lo, hi = (max(1, mark - _CONTEXT_LINES), min(len(lines), mark + _CONTEXT_LINES)) if mark else (1, len(lines))
    if parent.id in shown_scripts and not w.full and (lo, hi) != (1, len(lines)):
        w.folded += 1
        w.add(f"  its script (shown whole before), lines {lo}-{hi} of {len(lines)}:")
        width = len(str(len(lines)))
        w.lines.extend(f"    {'>' if i == mark else ' '} {i:>{width}} | {escape(lines[i - 1])}"
                       for i in range(lo, hi + 1))
        return
    w.add(f"  its script{f' (line {mark} marked >)' if mark is not None else ''}:")
    w.block("\n".join(lines), "    ", numbered=True, mark=mark, never_fold=True)


def _script_lines(text: str) -> list[str]:
    """A script's lines as an editor numbers them (a last newline ends the last line)."""
    lines = text.split("\n")
    return lines[:-1] if len(lines) > 1 and lines[-1] == "" else lines


def render_question(question: Question, *, full: bool = False, shown_scripts: Container[str] = ()) -> Rendered:
    """The text a person is asked, every line escaped, without the prompt for the answer.

    An approval (`kind == "approval"`): `? allow <tool> <arguments>` (the tool's canonical name,
    and the name it was called by when that is an alias); the arguments beside it when they are
    short, else one per line, each value whole unless long (then its head and tail, with a count
    of the characters and lines folded in between; a run of 16 or more spaces is shown as its
    count); a `script` argument always whole, its lines numbered. Then the gates' questions, the
    tool's `approval_note`, and where the call comes from: a direct call, or the calls it comes
    through (`question.chain`), the script of the run_code call that made it shown whole with
    the calling line marked (`>`), or only the lines around it when that script's id is in
    `shown_scripts` (a front end that showed it already). With `full`, nothing is folded.

    A question (`kind == "question"`): `? <text>` and its options, numbered.
    """
    w = _Writer(full)
    call = question.call
    if question.kind == "approval":
        tool = question.tool
        inline = _inline(call)
        head = f"? allow {_called(call, tool)}"
        w.add(f"{head} {inline}" if inline is not None else head)
        # the gates' questions, in a gutter: a value a gate quotes cannot make a line of its own
        by = ", ".join(escape(p, multiline=False) for p in question.asked_by) or "a gate"
        w.add(f"  asked by {by}:")
        w.block(question.text.strip("\n"), "  ")
        if inline is None:
            w.add("  arguments:")
            _arguments(w, call, "    ")
        note = getattr(tool, "approval_note", "") if tool is not None else ""
        if note:
            w.add(f"  note: {escape(note, multiline=False)}")
    else:
        first, _, rest = question.text.strip("\n").partition("\n")
        w.add(f"? {escape(first, multiline=False)}")
        if rest:  # in a gutter, so no line of the text can pass for an option
            w.block(rest, "  ")
        for n, option in enumerate(question.options, 1):
            w.add(f"  {n}) {escape(str(option), multiline=False)}")
    if question.kind == "approval" or question.chain:
        _origin(w, call, question.chain, shown_scripts)
    return Rendered("\n".join(w.lines), w.folded)


def render_call(call: ToolCall, width: int = 100) -> str:
    """`<name> <arguments as JSON>` on one line, escaped; arguments longer than `width` are cut
    with the count of what is cut (`... [+1,234 characters]`), for a log line, never for a
    question (which shows everything)."""
    args = escape(_json(call.arguments), multiline=False)
    if len(args) > width:
        args = f"{args[:width]}... [+{_count(len(args) - width, 'character')}]"
    return f"{escape(call.name, multiline=False)} {args}"


# -- streams ----------------------------------------------------------------------------------


def discard_typed_ahead(stream: IO[str]) -> None:
    """Drop the keys typed on a terminal and not read yet, so that the answer to a question is
    typed after the question was shown (a `y` typed while the model was still writing must not
    answer it). Does nothing for a stream that is not a terminal: piped input is an answer
    script, read as it comes."""
    try:
        if not stream.isatty():
            return
        import termios

        termios.tcflush(stream.fileno(), termios.TCIFLUSH)
    except (AttributeError, ImportError, OSError, ValueError):  # no termios (Windows), or no terminal
        pass



class _Protected:
    """A text stream whose writes are escaped; everything else is the stream's own."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # the stream's own error for bytes
            return self._stream.write(text)
        self._stream.write(escape(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def protect(stream: IO[str]) -> IO[str]:
    """`stream` itself when it is not a terminal (a pipe or a file gets the bytes as they are),
    else a wrapper that escapes everything written to it (`escape`, newlines and tabs kept).
    Wrapping twice is wrapping once."""
    if isinstance(stream, _Protected):
        return stream
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError, OSError):
        tty = False
    return _Protected(stream) if tty else stream  # type: ignore[return-value]
