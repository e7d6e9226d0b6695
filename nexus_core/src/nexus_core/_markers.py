"""The markers plugins and packages use: `hookimpl`, and `hookspec`, which is pluggy's hookspec
marker plus the hook's kind, declared where the hook is:

- "observer": sees an event; the return value is ignored, and each implementation runs
  contained (one that raises is logged, naming its plugin, and the others still run);
- "gate": decides (veto, rewrite, replace, ask); every answer is attributed to its plugin and a
  raise counts as a veto (fail closed);
- "contribution": gives something (tools, a config schema, commands, an answer);
- "lifecycle": is told of the plugin's own start and end (configure, shutdown).

`Nexus.notify` calls observer hooks and `Nexus`'s gates call gate hooks by these kinds; a
meta-test fails for a hookspec that declares none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, get_args, overload

import pluggy

PROJECT = "nexus"
HookKind = Literal["observer", "gate", "contribution", "lifecycle"]
HOOK_KINDS: tuple[str, ...] = get_args(HookKind)
#: the attribute `hookspec` sets on a hookspec function: its kind
KIND_ATTRIBUTE = f"{PROJECT}_kind"

F = TypeVar("F", bound=Callable[..., Any])

hookimpl = pluggy.HookimplMarker(PROJECT)


class HookspecMarker:
    """`@hookspec(kind="observer")`: marks a hook specification for pluggy (with pluggy's own
    options: `firstresult`, `historic`, `warn_on_impl`, `warn_on_impl_args`) and records its kind.
    The kind is required: a hook whose kind is not said would leave its implementations'
    failures undecided (contained, or a veto)."""

    def __init__(self, project_name: str) -> None:
        self.project_name = project_name
        self._mark = pluggy.HookspecMarker(project_name)

    @overload
    def __call__(self, function: F, *, kind: HookKind, firstresult: bool = ..., historic: bool = ...,
                 warn_on_impl: Warning | None = ..., warn_on_impl_args: Mapping[str, Warning] | None = ...) -> F: ...

    @overload
    def __call__(self, function: None = ..., *, kind: HookKind, firstresult: bool = ..., historic: bool = ...,
                 warn_on_impl: Warning | None = ...,
                 warn_on_impl_args: Mapping[str, Warning] | None = ...) -> Callable[[F], F]: ...

    def __call__(self, function: F | None = None, *, kind: HookKind, firstresult: bool = False,
                 historic: bool = False, warn_on_impl: Warning | None = None,
                 warn_on_impl_args: Mapping[str, Warning] | None = None) -> F | Callable[[F], F]:
        if kind not in HOOK_KINDS:
            raise ValueError(f"hook kind {kind!r} is not one of {', '.join(HOOK_KINDS)}")

        def mark(func: F) -> F:
            self._mark(func, firstresult=firstresult, historic=historic, warn_on_impl=warn_on_impl,
                       warn_on_impl_args=warn_on_impl_args)
            setattr(func, KIND_ATTRIBUTE, kind)
            return func

        return mark(function) if function is not None else mark


hookspec = HookspecMarker(PROJECT)


def hook_kind(spec_function: object) -> HookKind | None:
    """The kind a hookspec function declares, or None (a spec marked with pluggy's own marker)."""
    kind = getattr(spec_function, KIND_ATTRIBUTE, None)
    return kind if kind in HOOK_KINDS else None
