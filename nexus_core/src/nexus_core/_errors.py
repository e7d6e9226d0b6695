"""How an exception reads in a message: `TypeName: text`, one line, the same everywhere (a
failed plugin, a gate that raised, a handler's error result, a provider that failed)."""

from __future__ import annotations


def describe_exception(exc: BaseException) -> str:
    """`exc` as one line for a message: `TypeName: text` (the name alone when it has no text)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
