"""YAML read with bounds, for the config and for SKILL.md front matter: the number of values a
document stands for once its aliases are expanded, and how deep it nests, so a few hundred bytes
of aliases (a "billion laughs") are an error naming the line rather than gigabytes of memory.

Imported when a YAML text is first read, not when nexus_core is: PyYAML costs start-up time.
"""

from __future__ import annotations

from typing import Any

import yaml

#: the most values (scalars, lists, mappings) one YAML document may stand for once every alias is
#: expanded: far more than any config or front matter holds, far less than an alias bomb's billions
MAX_YAML_VALUES = 100_000
#: the deepest nesting of lists and mappings, aliases expanded (the code that walks the values
#: recurses; 64 levels is far more than a config uses)
MAX_YAML_DEPTH = 64


class YAMLLimitError(yaml.MarkedYAMLError):
    """A YAML document that is valid but passes one of the bounds above; `problem` names the bound
    and `problem_mark` the place (`problem_mark.line` counts from 0, as in every YAML error)."""

    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem=problem, problem_mark=mark)


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader (the pure-Python one, whose error messages and lines are the more
    precise) that stops composing past `max_depth` levels, before Python's recursion limit."""

    max_depth = MAX_YAML_DEPTH

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > self.max_depth:
                raise YAMLLimitError(f"lists and mappings nest more than {self.max_depth} levels deep here, "
                                     "the deepest Nexus reads",
                                     self.peek_event().start_mark)  # type: ignore[no-untyped-call]  # PyYAML's stubs
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_expansion(root: yaml.Node, max_values: int, max_depth: int) -> None:
    """Raise YAMLLimitError when `root`, its aliases expanded, holds more than `max_values`
    values or nests deeper than `max_depth`, or when an alias refers to a node that contains it.

    An alias is the very node its anchor names (the composer shares it, it does not copy), so the
    document is a graph; each node's expanded size and depth are worked out once, bottom up, in a
    walk of that graph that costs one step per node and edge, not per expanded value."""
    size: dict[int, int] = {}
    height: dict[int, int] = {}
    in_progress: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            in_progress.discard(key)
            kids = _children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            height[key] = 1 + max((height[id(k)] for k in kids), default=0)
            if size[key] > max_values:
                raise YAMLLimitError(f"aliases expand this value to more than {max_values} values, the most "
                                     "Nexus reads from one YAML document (an alias bomb?)", node.start_mark)
            if height[key] > max_depth:
                raise YAMLLimitError(f"lists and mappings nest more than {max_depth} levels deep here "
                                     "(aliases expanded), the deepest Nexus reads", node.start_mark)
            continue
        if key in in_progress:
            raise YAMLLimitError("this list or mapping holds an alias to itself (a recursive alias), "
                                 "which cannot be expanded", node.start_mark)
        if key in size:
            continue
        in_progress.add(key)
        stack.append((node, True))
        stack.extend((kid, False) for kid in _children(node))


def load_yaml(text: str, max_values: int = MAX_YAML_VALUES,
              max_depth: int = MAX_YAML_DEPTH) -> tuple[yaml.Node | None, Any]:
    """`(node, data)` of a one-document YAML text, read with the safe loader: the composed node
    graph (for line numbers) and the plain values built from it.

    Raises `yaml.YAMLError` for text that is not YAML, and `YAMLLimitError` (a YAMLError with the
    place) for a document whose aliases expand past `max_values` values or `max_depth` levels, or
    that refers to itself. The bounds are checked on the composed graph, before any value is built
    or walked. (The caller bounds the text's own size: composing is linear in it.)"""
    loader = _BoundedLoader(text)
    loader.max_depth = max_depth
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        _check_expansion(node, max_values, max_depth)
        try:
            data = loader.construct_document(node)
        except ValueError as exc:  # e.g. an integer of more digits than Python converts
            raise YAMLLimitError(f"a value cannot be read: {exc}", node.start_mark) from None
        return node, data
    finally:
        loader.dispose()
