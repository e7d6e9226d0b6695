"""What a sandbox is made of: the layers (by name, in the order `enter()` applies them), the
resource limits, and the policy `enter()` carries out."""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from .paths import runtime_read_paths

#: the layers, in the order enter() applies them (see the package docstring): the only definition
LAYERS: tuple[str, ...] = ("env", "rlimits", "net", "uid", "fs", "seccomp")
ALL_LAYERS: frozenset[str] = frozenset(LAYERS)

#: a child's uid under the ``uid`` layer is this plus its pid
DEFAULT_UID_BASE = 2_000_000_000


class SandboxError(Exception):
    """A requested layer (or the basic process setup) could not be applied; never ignored."""

    def __init__(self, layer: str, reason: str) -> None:
        super().__init__(f"sandbox layer {layer!r} could not be applied: {reason}")
        self.layer = layer
        self.reason = reason


@attrs.frozen
class Limits:
    """Resource limits of one run. threads counts the main thread; it is enforced only with the
    ``uid`` layer (RLIMIT_NPROC does nothing for root)."""

    memory_mb: int = 512
    cpu_seconds: int = 30
    open_files: int = 64
    file_size_mb: int = 16
    threads: int = 64


def _check_layers(_inst: object, _attr: object, value: frozenset[str]) -> None:
    unknown = set(value) - ALL_LAYERS
    if unknown:
        raise ValueError(f"unknown sandbox layer(s) {sorted(unknown)}; known: {', '.join(LAYERS)}")


def _to_paths(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _to_layers(value: Iterable[str]) -> frozenset[str]:
    return frozenset(value)


def _to_fds(value: Iterable[int]) -> tuple[int, ...]:
    return tuple(int(fd) for fd in value)


@attrs.frozen
class SandboxPolicy:
    """What `enter()` does. net_fd: an fd from `make_shared_netns()` to join instead of creating
    a namespace per child (creating one costs ~0.6 ms, joining ~15 us); it is closed by enter()."""

    scratch_dir: str
    read_paths: tuple[str, ...] = attrs.field(factory=runtime_read_paths, converter=_to_paths)
    limits: Limits = attrs.field(factory=Limits)
    layers: frozenset[str] = attrs.field(default=ALL_LAYERS, converter=_to_layers, validator=_check_layers)
    keep_fds: tuple[int, ...] = attrs.field(default=(), converter=_to_fds)
    net_fd: int | None = None
    uid_base: int = DEFAULT_UID_BASE
    #: the pid of the process that forked this one, as it knew its own pid before the fork (None:
    #: read at entry); a parent that died before the child ran would otherwise go unnoticed: the
    #: child would read its new parent's pid, and the death signal would never come
    parent: int | None = None


@attrs.frozen
class LayerStatus:
    name: str
    active: bool
    detail: str


