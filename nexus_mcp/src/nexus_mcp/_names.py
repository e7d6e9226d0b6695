"""The names MCP servers' tools get in Nexus, and the rule that no server's tool takes a name
that another server's tool would have.

Tool `t` of server `s` is the Nexus tool `<prefix>_<t>`: the prefix is the server's `prefix`
setting (its name by default), and the whole is `sanitize`d (each character outside
`[a-zA-Z0-9_-]` made `_`, cut to 64). run_code's bindings then make that name a Python
identifier, `-` becoming `_`. Two tools can meet at either step:

- in Nexus: server `a` tool `b_c` and server `a_b` tool `c` are both `a_b_c`; so are two long
  names cut to the same 64 characters;
- in run_code: server `github` tool `enterprise-create_issue` (`github_enterprise-create_issue`)
  and server `github_enterprise` tool `create_issue` (`github_enterprise_create_issue`) are two
  Nexus names but one Python name, `tools.github_enterprise_create_issue`.

Whichever tool got such a name, a script or a model meaning the other would call it, with
arguments meant for another server. So a name two tools would share goes to neither, whatever
the order in which the servers start or list their tools:

- a name contested by tools of different servers (in Nexus or in Python), or by two tools of one
  server that would be one Nexus tool, is given to none of them, each reported;
- except that a name already given stays where it is: a tool listed later (a server's new tool
  list, a lazy server started after the others) that would take it is the one left out. A name
  never moves from one server's tool to another's.

Two tools of one server whose Nexus names differ but whose Python names match (`a-b`, `a_b`)
are one server's business and both stay Nexus tools; run_code's bindings report that clash.
The fix for a contested name is the `prefix` setting of one of the servers, which every report
names. (`python_name` repeats run_code's mapping: a shared function for it belongs in
nexus_core.)
"""

from __future__ import annotations

import keyword
from collections import defaultdict
from collections.abc import Iterable, Mapping

import attrs

from nexus_core import sanitize

from ._settings import PLUGIN_ID


def nexus_tool_name(prefix: str, tool: str) -> str:
    """`<prefix>_<tool>` (just `<tool>` for an empty prefix), each character outside
    `[a-zA-Z0-9_-]` made `_`, cut to 64."""
    return sanitize(f"{prefix}_{tool}" if prefix else tool)


def python_name(name: str) -> str:
    """The Python identifier run_code's bindings make of a (sanitized) Nexus tool name:
    `-` made `_`, a leading digit or a keyword guarded as `py_identifier` does."""
    ident = name.replace("-", "_")
    if ident[:1].isdigit():
        ident = "_" + ident
    if keyword.iskeyword(ident):
        ident += "_"
    if ident.startswith("__"):
        ident = "f" + ident
    return ident


@attrs.frozen
class Claim:
    """One server's tool and the Nexus name it would have."""

    server: str
    tool: str  #: the server's own name for it
    name: str  #: its Nexus name

    @property
    def python(self) -> str:
        return python_name(self.name)


@attrs.frozen
class Plan:
    """What `plan_names` decided: by server, the claims given their names, and the problems
    (each one listed under every server it names)."""

    granted: dict[str, list[Claim]]
    problems: dict[str, list[str]]


def plan_names(claims: Iterable[Claim], given: Mapping[str, tuple[str, str]]) -> Plan:
    """Which claims get their names. `given` is what holds a name now: Nexus name -> (server,
    tool) of the tool registered under it."""
    by_python: dict[str, list[Claim]] = defaultdict(list)
    for claim in claims:
        by_python[claim.python].append(claim)
    granted: dict[str, list[Claim]] = defaultdict(list)
    problems: dict[str, list[str]] = defaultdict(list)
    for python, group in by_python.items():
        servers = {c.server for c in group}
        names = [c.name for c in group]
        if len(servers) == 1 and len(set(names)) == len(names):
            for claim in group:  # one tool, or one server's tools that differ in Nexus
                granted[claim.server].append(claim)
            continue
        kept = [c for c in group if given.get(c.name) == (c.server, c.tool)]
        for claim in kept:
            granted[claim.server].append(claim)
        problem = _contested(python, group, kept)
        for server in sorted(servers, key=[c.server for c in group].index):
            problems[server].append(problem)
    return Plan(dict(granted), dict(problems))


def _contested(python: str, group: list[Claim], kept: list[Claim]) -> str:
    tools = " and ".join(f"MCP server {c.server!r} tool {c.tool!r}" for c in group)
    names = sorted({c.name for c in group})
    if len(names) == 1:
        where = f"the Nexus tool {names[0]!r}"
    else:
        where = (f"`tools.{python}` in run_code (as Nexus tools {' and '.join(map(repr, names))}; run_code's "
                 "bindings make '-' '_')")
    both = "both" if len(group) == 2 else "all"
    if kept:
        holder = kept[0]
        what = (f"{holder.name!r} stays MCP server {holder.server!r}'s tool {holder.tool!r}, which had it first, "
                f"and the {'other is' if len(group) == 2 else 'others are'} left out")
    else:
        what = f"{'neither' if len(group) == 2 else 'none'} is offered, so no call meant for one can reach another"
    servers = sorted({c.server for c in group}, key=[c.server for c in group].index)
    if len(servers) == 1:
        fix = "the server's own names clash, which no setting can part; ask its authors to rename one"
    else:
        fix = "give one of the servers another prefix: " + " or ".join(
            f"plugins.{PLUGIN_ID}.servers.{s}.prefix" for s in servers)
    return f"tool name collision: {tools} would {both} be {where}: {what} ({fix})"
