"""Docstrings as a tool's description and its parameters' texts: Google (`Args:`), NumPy
(`Parameters` underlined) and Sphinx (`:param x:`) styles."""

from __future__ import annotations

import inspect
import re

_ARG_SECTIONS = {"args", "arguments", "parameters", "params", "keyword args", "keyword arguments",
                 "kwargs", "other parameters"}
_OTHER_SECTIONS = {"returns", "return", "yields", "yield", "raises", "raise", "examples", "example",
                   "notes", "note", "see also", "references", "attributes", "warns", "warnings",
                   "warning", "todo", "methods"}
# `name: text`, `name (type): text`, `*args: text` (Google style)
_GOOGLE_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:(?:\s+(.*))?$")
# `name : type` or `name` (NumPy style; the text follows on indented lines)
_NUMPY_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(?::.*)?$")
# `:param name: text` or `:param type name: text` (Sphinx style)
_SPHINX_PARAM = re.compile(r"^:param\s+(?:[^:]*\s)?\*{0,2}(\w+)\s*:\s*(.*)$")
_SPHINX_FIELD = re.compile(r"^:\w[^:]*:")
_UNDERLINE = re.compile(r"^-{3,}$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(description, {parameter: text}) from a docstring in Google (`Args:`), NumPy
    (`Parameters` underlined) or Sphinx (`:param x:`) style.

    The description is the text before the first section; `Returns:`, `Raises:` and the like
    are left out of both, since the model needs neither to call the tool.
    """
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    desc: list[str] = []
    params: dict[str, str] = {}
    mode = "desc"  # desc | google | numpy | sphinx | other
    current: str | None = None
    entry_indent: int | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        i += 1
        # NumPy header: a title line underlined with dashes
        if indent == 0 and stripped and i < len(lines) and _UNDERLINE.match(lines[i].strip()):
            title = stripped.lower()
            mode = "numpy" if title in _ARG_SECTIONS else "other"
            current, entry_indent = None, None
            i += 1
            continue
        # Google header: `Args:` alone on a line at the left margin
        if indent == 0 and stripped.endswith(":") and stripped[:-1].strip().lower() in _ARG_SECTIONS | _OTHER_SECTIONS:
            mode = "google" if stripped[:-1].strip().lower() in _ARG_SECTIONS else "other"
            current, entry_indent = None, None
            continue
        sphinx = _SPHINX_PARAM.match(stripped)
        if sphinx and indent == 0:
            mode, current = "sphinx", sphinx.group(1)
            params[current] = sphinx.group(2).strip()
            continue
        if _SPHINX_FIELD.match(stripped) and indent == 0:
            mode, current = "other", None  # :type x:, :returns:, :raises E: ...
            continue
        if mode == "desc":
            desc.append(line)
        elif mode == "google":
            if not stripped:
                continue
            if entry_indent is None:
                entry_indent = indent
            match = _GOOGLE_ENTRY.match(stripped)
            if indent <= entry_indent and match:
                current = match.group(1)
                params[current] = (match.group(2) or "").strip()
            elif current is not None:
                params[current] = (params[current] + " " + stripped).strip()
        elif mode == "numpy":
            if not stripped:
                continue
            match = _NUMPY_ENTRY.match(stripped)
            if indent == 0 and match:
                current = match.group(1)
                params.setdefault(current, "")
            elif current is not None:
                params[current] = (params[current] + " " + stripped).strip()
        elif mode == "sphinx":
            if stripped and indent > 0 and current is not None:
                params[current] = (params[current] + " " + stripped).strip()
            elif stripped:
                mode, current = "other", None
    return "\n".join(desc).strip(), params


