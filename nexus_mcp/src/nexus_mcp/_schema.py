"""Plain schemas from an MCP server's: local `$ref`s inlined where that terminates.

Servers built on pydantic (the SDK's `MCPServer` among them) put nested models under `$defs` and
point at them with `{"$ref": "#/$defs/Name"}`. Not every consumer follows references: run_code's
typed bindings and the Gemini adapter want the nested object where it is used. So a reference
into the schema's own `$defs` (or `definitions`) is replaced by a copy of what it names, unless
the definition refers back to itself (a tree, a linked list): inlining that would never end, so
a recursive reference stays as it is, with the definitions it needs, and a consumer that cannot
follow it treats that part as untyped JSON. References elsewhere (another document, a path that
does not resolve) are left alone too.

A schema comes from a server, so inlining is bounded: definitions that refer to each other twice
over, level after level, would double the schema at each level, and a schema that would grow
past `MAX_NODES` is kept as it was (with its references) instead.
"""

from __future__ import annotations

from typing import Any

_DEF_KEYS = ("$defs", "definitions")
#: how many objects and arrays an inlined schema may hold; past it, the schema is left as it was
MAX_NODES = 20_000


class _TooBig(Exception):
    pass


def _target(ref: Any, defs: dict[str, dict[str, Any]]) -> str | None:
    """The definition key a local `$ref` names (`#/$defs/Name`), or None."""
    if not isinstance(ref, str):
        return None
    for key in _DEF_KEYS:
        prefix = f"#/{key}/"
        if ref.startswith(prefix):
            name = ref[len(prefix):].replace("~1", "/").replace("~0", "~")
            qualified = f"{key}/{name}"
            return qualified if qualified in defs else None
    return None


def _refs_in(node: Any, defs: dict[str, dict[str, Any]], out: set[str]) -> set[str]:
    if isinstance(node, dict):
        target = _target(node.get("$ref"), defs)
        if target is not None:
            out.add(target)
        for key, value in node.items():
            if key not in _DEF_KEYS:
                _refs_in(value, defs, out)
    elif isinstance(node, list):
        for item in node:
            _refs_in(item, defs, out)
    return out


def _recursive(defs: dict[str, dict[str, Any]]) -> set[str]:
    """The definitions that can reach themselves through references."""
    edges = {name: _refs_in(schema, defs, set()) for name, schema in defs.items()}
    recursive = set()
    for start in defs:
        seen: set[str] = set()
        stack = list(edges[start])
        while stack:
            name = stack.pop()
            if name == start:
                recursive.add(start)
                break
            if name not in seen:
                seen.add(name)
                stack.extend(edges[name])
    return recursive


def inline_refs(schema: Any) -> Any:
    """A copy of `schema` with every local reference to a non-recursive definition replaced by
    the definition itself; the definitions still referred to (the recursive ones, and those they
    use) are kept, the others dropped. A schema without definitions comes back unchanged."""
    if not isinstance(schema, dict) or not any(isinstance(schema.get(k), dict) for k in _DEF_KEYS):
        return schema
    defs: dict[str, dict[str, Any]] = {}
    for key in _DEF_KEYS:
        for name, sub in (schema.get(key) or {}).items() if isinstance(schema.get(key), dict) else ():
            if isinstance(sub, dict):
                defs[f"{key}/{name}"] = sub
    keep = _recursive(defs)
    made = 0

    def walk(node: Any, expanding: tuple[str, ...]) -> Any:
        nonlocal made
        if isinstance(node, (list, dict)):
            made += 1
            if made > MAX_NODES:
                raise _TooBig
        if isinstance(node, list):
            return [walk(item, expanding) for item in node]
        if not isinstance(node, dict):
            return node
        target = _target(node.get("$ref"), defs)
        if target is not None and target not in keep and target not in expanding:
            resolved = walk(defs[target], (*expanding, target))
            siblings = {k: walk(v, expanding) for k, v in node.items() if k != "$ref" and k not in _DEF_KEYS}
            if not siblings:
                return resolved
            clash = [k for k in siblings if k in resolved and siblings[k] != resolved[k]
                     and k not in ("title", "description", "default", "examples")]
            if clash:  # both constrain the same keyword: both must hold
                return {"allOf": [resolved], **siblings}
            return {**resolved, **siblings}
        return {k: walk(v, expanding) for k, v in node.items() if k not in _DEF_KEYS}

    try:
        out = walk(schema, ())
        # the definitions the result still refers to, and the ones those refer to
        needed = _refs_in(out, defs, set())
        frontier = list(needed)
        while frontier:
            for name in _refs_in(walk(defs[frontier.pop()], ()), defs, set()):
                if name not in needed:
                    needed.add(name)
                    frontier.append(name)
        for key in _DEF_KEYS:
            kept = {name.split("/", 1)[1]: walk(defs[name], ()) for name in sorted(needed)
                    if name.startswith(f"{key}/")}
            if kept:
                out[key] = kept
    except _TooBig:
        return schema
    return out
