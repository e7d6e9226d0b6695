"""The `nexus.ray` plugin: run_code's scripts in the sandbox pools of a Ray cluster's nodes.

    plugins:
      nexus.tool.code_exec:
        launcher: ray
        address: auto      # or host:port, ray://host:port of a running cluster

`launcher.RemoteLauncher` is the code_exec engine's launcher then (`Launcher` stays the only seam):
a `PoolActor` per node (num_cpus=0) runs the machine pool server there and forks each script; the
child's pipes are relayed to the session over a direct TCP connection with a per-child token, so
every inner call is answered by the session's own Nexus (its gates, its ledger). See
docs/scale-out.md. The plugin itself only adds nothing but its presence (`nexus plugins`).

`nexus_ray.SessionActor` (nexus_ray.session) is a Nexus inside a Ray actor: its gates run there,
its scripts on the worker nodes.
"""

from __future__ import annotations

from typing import Any

from nexus_core.plugins import Plugin

__version__ = "0.1.0"
PLUGIN_ID = "nexus.ray"

__all__ = ["PLUGIN_ID", "NexusSession", "RayPlugin", "SessionActor"]


def __getattr__(name: str) -> Any:
    """`SessionActor` and `NexusSession` (nexus_ray.session), imported on first use: importing
    this plugin (`nexus plugins`) does not import Ray."""
    if name in ("SessionActor", "NexusSession"):
        from nexus_ray import session

        return getattr(session, name)
    raise AttributeError(f"module 'nexus_ray' has no attribute {name!r}")


class RayPlugin(Plugin[None]):
    """Present so that `nexus plugins` shows the Ray launcher installed; the launcher is chosen in
    code_exec's section (`launcher: ray`), not here."""

    NEXUS_PLUGIN_ID = PLUGIN_ID
