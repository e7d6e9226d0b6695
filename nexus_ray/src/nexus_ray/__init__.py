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
"""

from __future__ import annotations

from nexus_core.plugins import Plugin

__version__ = "0.1.0"
PLUGIN_ID = "nexus.ray"

__all__ = ["PLUGIN_ID", "RayPlugin"]


class RayPlugin(Plugin[None]):
    """Present so that `nexus plugins` shows the Ray launcher installed; the launcher is chosen in
    code_exec's section (`launcher: ray`), not here."""

    NEXUS_PLUGIN_ID = PLUGIN_ID
