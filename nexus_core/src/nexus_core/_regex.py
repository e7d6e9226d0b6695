"""Regular expressions from JSON schemas (`pattern`, `patternProperties`), matched by RE2.

A tool's input schema comes from its author (a third-party plugin, an MCP server), the strings
it is matched against from a model. Python's `re` backtracks: `(a+)+$` against thirty `a`s and
a `!` runs for minutes holding the GIL, and every host thread stops with it. RE2 (the
`google-re2` binding, maintained by RE2's authors) matches in time linear in the text, whatever
the pattern, with the GIL released, and its memory is capped per pattern. It has no
backreferences, lookaround, atomic groups, possessive quantifiers or conditionals; a schema that
uses one is refused where it is compiled (a tool's registration), naming the feature.

JSON Schema's patterns are ECMA-262 regexes, matched anywhere in the string (`search`). RE2 is
closer to that dialect than `re` is (`\\d` and `\\w` are ASCII, as in ECMA-262); ECMA's `\\uXXXX`
and `\\u{X...}` are rewritten to RE2's `\\x{...}`.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import re2  # type: ignore[import-untyped]

#: memory RE2 may use for one compiled pattern (program and DFA cache), in bytes
RE2_MAX_MEM = 8 << 20
#: the longest pattern a schema may hold, in characters
MAX_PATTERN_CHARS = 16384

_ECMA_ESCAPES = re.compile(r"\\(?:u([0-9a-fA-F]{4})|u\{([0-9a-fA-F]{1,6})\}|.)", re.DOTALL)

#: RE2's message (its start) -> what the pattern uses that RE2 does not have
_UNSUPPORTED = [
    (re.compile(r"invalid escape sequence: \\[1-9k]"), "a backreference (\\1 or \\k<name>)"),
    (re.compile(r"invalid perl operator: \(\?[=!]"), "lookahead ((?=...) or (?!...))"),
    (re.compile(r"invalid perl operator: \(\?<[=!]"), "lookbehind ((?<=...) or (?<!...))"),
    (re.compile(r"invalid perl operator: \(\?>"), "an atomic group ((?>...))"),
    (re.compile(r"invalid perl operator: \(\?\("), "a conditional ((?(1)...|...))"),
    (re.compile(r"bad repetition operator: [*+?}]\+"), "a possessive quantifier (*+, ++, ?+)"),
]


class PatternRefused(ValueError):
    """A schema pattern RE2 cannot run; the message names the pattern and why."""


def _options() -> Any:
    options = re2.Options()
    options.max_mem = RE2_MAX_MEM
    options.log_errors = False  # RE2 would print every refused pattern on stderr
    return options


def _to_re2(pattern: str) -> str:
    def rewrite(m: re.Match[str]) -> str:
        code = m.group(1) or m.group(2)
        return rf"\x{{{code}}}" if code else m.group(0)

    return _ECMA_ESCAPES.sub(rewrite, pattern)


def _message(exc: Exception) -> str:
    raw = exc.args[0] if exc.args else str(exc)
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


@functools.lru_cache(maxsize=4096)
def compile_pattern(pattern: str) -> Any:
    """`pattern` compiled by RE2 (cached), or PatternRefused naming what RE2 cannot run."""
    shown = pattern if len(pattern) <= 200 else pattern[:200] + "..."
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternRefused(f"pattern {shown!r} is {len(pattern)} characters long, more than the "
                             f"{MAX_PATTERN_CHARS} a schema pattern may be")
    if _has_lone_surrogate(pattern):
        raise PatternRefused(f"pattern {shown!r} holds a lone surrogate (a \\ud800-\\udfff code point that is "
                             "half of a UTF-16 pair): it is not text RE2 can match; write the character it stands for")
    try:
        return re2.compile(_to_re2(pattern), _options())
    except re2.error as exc:
        message = _message(exc)
    for check, feature in _UNSUPPORTED:
        if check.match(message):
            raise PatternRefused(
                f"pattern {shown!r} uses {feature}, which RE2 does not have: schema patterns are matched "
                "by RE2, in time linear in the text, so that no argument can stall the host; rewrite it "
                "without backreferences, lookaround, atomic groups, possessive quantifiers or conditionals")
    if message.startswith("pattern too large"):
        raise PatternRefused(f"pattern {shown!r} compiles to more than RE2's memory limit for one pattern "
                             f"({RE2_MAX_MEM >> 20} MiB); use fewer or smaller repeats")
    raise PatternRefused(f"pattern {shown!r} is not a regular expression RE2 can run: {message}")


def _has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _matchable(text: str) -> str:
    """`text` as RE2 can take it: JSON can carry a lone surrogate (`"\\ud800"`), which is not
    UTF-8; it is matched as U+FFFD, the character that stands for what cannot be shown."""
    if not _has_lone_surrogate(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def search(pattern: str, text: str) -> bool:
    """Whether `pattern` matches anywhere in `text` (JSON Schema's `pattern`), in linear time."""
    return compile_pattern(pattern).search(_matchable(text)) is not None
