"""Patterns a model writes (grep's regex, glob's and grep's `include` globs), compiled so that no
pattern can make matching take more than time linear in the text it reads.

Python's `re` backtracks: `(a+)+$` against a line of thirty `a`s and a `b` runs for minutes,
holding the GIL, so every thread of the host stops with it; a glob turned into a Python regex
backtracks the same way (`*a*a*a...` against one long name). Here every pattern is compiled by
RE2 (the `google-re2` binding, maintained by RE2's authors): an automaton, no backtracking, so
matching costs time linear in the text, whatever the pattern; its memory is capped per pattern
(`RE2_MAX_MEM`), and the binding lets go of the GIL while it matches.

What that costs: RE2 has no backreferences, lookaround, atomic groups, possessive quantifiers or
conditionals (each needs backtracking), and counts a repeat `{n,m}` to at most 1000. A pattern
that uses one is refused with a message naming the feature; `\\Z` and `\\uXXXX`, which RE2
spells `\\z` and `\\x{XXXX}`, are rewritten.

Limits, each refused with a message naming it: the pattern's length, and for globs the depth of
nested braces and the number of brace choices. Braces are never expanded into many patterns: a
`{a,b}` becomes the alternation `(?:a|b)`, so a pattern costs its length, not the number of paths
it could name.
"""

from __future__ import annotations

import re
from typing import Any

import re2  # type: ignore[import-untyped]

from ._paths import FileToolError

#: the longest regex grep takes, in characters
MAX_REGEX_CHARS = 8192
#: the longest glob (glob's `pattern`, grep's `include`), in characters
MAX_GLOB_CHARS = 4096
#: how deep `{...}` may nest in a glob
MAX_BRACE_DEPTH = 8
#: how many choices all the `{a,b,...}` of one glob may hold together
MAX_BRACE_CHOICES = 1024
#: instruction-bytes one RE2 search may cost: its text is cut to pieces of at most this divided by
#: the pattern's program size (`piece_bytes`). RE2 is linear in the text, but its slowest
#: automaton costs ~4.5 ns per program instruction per byte here: `\w{1000}` four times (12,000
#: instructions) takes 54 us a byte, a minute a megabyte. Capped like this, one search costs at
#: most ~0.6 s, and a tool checks its deadline between searches.
WORK_PER_SEARCH = 1 << 27
#: the most a line is read at once (for the cheap patterns that are nearly all of them)
MAX_PIECE_BYTES = 1 << 20
#: the least: below it the pieces would be too small to hold a line worth finding
MIN_PIECE_BYTES = 4 << 10
#: memory RE2 may use for one compiled pattern (its program and its DFA cache), in bytes; a
#: pattern whose program does not fit is refused, a search whose DFA fills it goes on with a
#: slower automaton that is still linear
RE2_MAX_MEM = 8 << 20


class PatternError(FileToolError):
    """A pattern refused: what is wrong, which rule, which limit."""


def _options(ignore_case: bool = False) -> Any:
    options = re2.Options()
    options.max_mem = RE2_MAX_MEM
    options.log_errors = False  # RE2 would print every refused pattern on stderr
    options.case_sensitive = not ignore_case
    return options


# -- regex ------------------------------------------------------------------------------------

#: Python spellings RE2 does not take, rewritten outside character classes and escapes: \Z is
#: RE2's \z; \uXXXX and \UXXXXXXXX are RE2's \x{...}
_PYTHON_ESCAPES = re.compile(r"\\(?:(Z)|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|.)", re.DOTALL)


def _to_re2(pattern: str) -> str:
    def rewrite(m: re.Match[str]) -> str:
        if m.group(1):
            return r"\z"
        code = m.group(2) or m.group(3)
        return rf"\x{{{code}}}" if code else m.group(0)

    return _PYTHON_ESCAPES.sub(rewrite, pattern)


#: RE2's message (start) -> what the pattern uses that RE2 does not have
_UNSUPPORTED = [
    (re.compile(r"invalid escape sequence: \\[1-9]"), "a backreference (\\1)"),
    (re.compile(r"invalid escape sequence: \\g"), "a backreference (\\g<...>)"),
    (re.compile(r"invalid perl operator: \(\?P"), "a named backreference ((?P=name))"),
    (re.compile(r"invalid perl operator: \(\?[=!]"), "lookahead ((?=...) or (?!...))"),
    (re.compile(r"invalid perl operator: \(\?<[=!]"), "lookbehind ((?<=...) or (?<!...))"),
    (re.compile(r"invalid perl operator: \(\?>"), "an atomic group ((?>...))"),
    (re.compile(r"invalid perl operator: \(\?\("), "a conditional ((?(1)...|...))"),
    (re.compile(r"invalid perl operator: \(\?#"), "a comment group ((?#...))"),
    (re.compile(r"invalid perl operator: \(\?x"), "verbose mode ((?x))"),
    (re.compile(r"invalid perl operator: \(\?[auL]"), "the flag (?a), (?u) or (?L)"),
    (re.compile(r"bad repetition operator: [*+?}]\+"), "a possessive quantifier (*+, ++, ?+)"),
]


def _explain(kind: str, pattern: str, message: str) -> str:
    shown = pattern if len(pattern) <= 200 else pattern[:200] + "…"
    for check, feature in _UNSUPPORTED:
        if check.match(message):
            return (f"{kind} {shown!r} uses {feature}, which RE2 does not have: patterns are matched by RE2, "
                    "in time linear in the text, so none can stall the host, and RE2 has no backreferences, "
                    "lookaround, atomic groups, possessive quantifiers or conditionals; rewrite it without them "
                    "(a second, narrower search often does it)")
    if message.startswith("invalid repetition size"):
        return (f"{kind} {shown!r}: {message}; RE2 counts a repeat to at most 1000, repeats nested in "
                "repeats multiplied together")
    if message.startswith("pattern too large"):
        return (f"{kind} {shown!r} compiles to more than RE2's memory limit for one pattern "
                f"({RE2_MAX_MEM >> 20} MiB); use a shorter pattern, or fewer or smaller repeats")
    return f"invalid {kind} {shown!r}: {message}"


def compile_regex(pattern: str, ignore_case: bool = False) -> Any:
    """grep's pattern, compiled by RE2, or PatternError naming the rule it breaks."""
    if len(pattern) > MAX_REGEX_CHARS:
        raise PatternError(f"the regular expression is {len(pattern)} characters long; grep takes at most "
                           f"{MAX_REGEX_CHARS} (pattern length limit)")
    try:
        return re2.compile(_to_re2(pattern), _options(ignore_case))
    except re2.error as exc:
        raise PatternError(_explain("regular expression", pattern, _message(exc))) from None


def piece_bytes(regex: Any) -> int:
    """How many bytes of a line one search of `regex` may take (see WORK_PER_SEARCH)."""
    return max(MIN_PIECE_BYTES, min(MAX_PIECE_BYTES, WORK_PER_SEARCH // max(1, regex.programsize)))


def _message(exc: Exception) -> str:
    raw = exc.args[0] if exc.args else str(exc)
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


# -- glob -------------------------------------------------------------------------------------


def _class_end(pattern: str, i: int) -> int:
    """Where the character class opening at `i` closes (`]` after at least one character), or -1."""
    return pattern.find("]", i + 2)


def _braces(pattern: str) -> dict[int, int]:
    """{index of `{`: index of its `}`} for the braces that close; an unclosed `{` is literal.
    Character classes are skipped, as translation skips them. One pass, a stack."""
    pairs: dict[int, int] = {}
    open_at: list[int] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "[" and (end := _class_end(pattern, i)) != -1:
            i = end + 1
            continue
        if ch == "{":
            open_at.append(i)
        elif ch == "}" and open_at:
            pairs[open_at.pop()] = i
        i += 1
    return pairs


def translate_glob(pattern: str) -> str:
    """The RE2 regex for a glob over `/`-separated paths, matched against the whole path.

    `*` and `?` stay within one path segment, `**` as a whole segment spans any number of them
    (`**/*.py` matches `a.py` and `x/y/a.py`), `[abc]` and `[!abc]` are character classes and
    `{py,pyi}` is a choice (nested choices too). Hidden files match like any other. One pass over
    the pattern; PatternError past the limits.
    """
    if len(pattern) > MAX_GLOB_CHARS:
        raise PatternError(f"the glob is {len(pattern)} characters long; at most {MAX_GLOB_CHARS} are taken "
                           "(pattern length limit)")
    pairs = _braces(pattern)
    closing: list[int] = []  # the `}` of each brace we are inside, innermost last
    choices = 0
    out: list[str] = []
    at_segment_start = True  # after `/`, at the start, or at the start of a choice

    def ends_segment(j: int) -> bool:
        return j == len(pattern) or pattern[j] == "/" or (bool(closing) and (pattern[j] == "," or j == closing[-1]))

    i = 0
    while i < len(pattern):
        ch = pattern[i]
        starts = False
        if ch == "*" and pattern.startswith("**", i) and at_segment_start and ends_segment(i + 2):
            if pattern[i + 2:i + 3] == "/":
                out.append("(?:.*/)?")  # `**/`: no folder, or any number of them
                i += 3
                starts = True
            else:
                out.append(".*")
                i += 2
        elif ch == "*":
            out.append("[^/]*")
            i += 1
        elif ch == "?":
            out.append("[^/]")
            i += 1
        elif ch == "[" and (end := _class_end(pattern, i)) != -1:
            body = pattern[i + 1:end]
            negate = body.startswith("!")
            body = re.sub(r"([\\\[\]^])", r"\\\1", body[1:] if negate else body)
            out.append("[" + ("^" if negate else "") + body + "]")
            i = end + 1
        elif ch == "{" and i in pairs:
            closing.append(pairs[i])
            if len(closing) > MAX_BRACE_DEPTH:
                raise PatternError(f"the glob nests braces more than {MAX_BRACE_DEPTH} deep (brace depth limit)")
            choices += 1
            out.append("(?:")
            i += 1
            starts = True
        elif ch == "," and closing:
            choices += 1
            if choices > MAX_BRACE_CHOICES:
                raise PatternError(f"the glob's braces hold more than {MAX_BRACE_CHOICES} choices "
                                   "(brace choices limit)")
            out.append("|")
            i += 1
            starts = True
        elif ch == "}" and closing and closing[-1] == i:
            closing.pop()
            out.append(")")
            i += 1
        else:
            out.append(_literal(ch))
            i += 1
            starts = ch == "/"
        at_segment_start = starts
    return "".join(out) + r"\z"


def _literal(ch: str) -> str:
    return "\\" + ch if ch.isascii() and not ch.isalnum() and ch != "_" and ch.isprintable() else ch


def compile_glob(pattern: str) -> Any:
    """A compiled RE2 regex for a glob (see `translate_glob`); use `.match(path)`."""
    try:
        return re2.compile(translate_glob(pattern), _options())
    except re2.error as exc:
        raise PatternError(_explain("glob", pattern, _message(exc))) from None


def compile_literal(text: str) -> Any:
    """A compiled RE2 regex matching exactly the path `text` (no glob characters), like
    `compile_glob`'s."""
    return re2.compile("".join(_literal(ch) for ch in text) + r"\z", _options())


def subject(path: str) -> bytes:
    """A path as the text a glob is matched against: UTF-8, with a name's undecodable bytes (kept
    as surrogates by Python) as `?`, so that `*` and `?` match them like any character."""
    return path.encode("utf-8", "replace")


def purge() -> None:
    """Drop the compiled patterns the re2 module keeps (its LRU cache holds 128, each with up to
    RE2_MAX_MEM of DFA states): a call's patterns are not kept after it."""
    re2.purge()
