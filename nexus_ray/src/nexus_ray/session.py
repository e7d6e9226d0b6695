"""`SessionActor`: a Nexus inside a Ray actor (issue 27, item 1).

The actor holds one `Nexus`, made in its own process from the config, plugins and tools it is
given: its gates, tools, workspace and ledger live there, and it is the only place gates run. With
`launcher: ray` in its code_exec section, the scripts of its `run_code` run in the pools of the
cluster's worker nodes (`RemoteLauncher`), and their inner calls come back to this actor's Nexus
over the relay. `num_cpus=0`: it waits on others' work, and is placed on a full node (the head,
typically: `.options(resources={HEAD_RESOURCE: 0.001})`).

    actor = SessionActor.options(resources={HEAD_RESOURCE: 0.001}).remote(config, plugins=[...], tools=[...])
    result = ray.get(actor.run_code.remote("def run(ctx):\\n    return 1\\n"), timeout=120)

Plugins and tools go to the actor pickled (Ray's cloudpickle); a plugin named in the config's
`plugins.active` is loaded there as any Nexus loads it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import ray

from nexus_core import Nexus, ToolResult


class NexusSession:
    """The actor's class (`SessionActor` is it as a Ray actor): one Nexus, its calls as methods."""

    def __init__(self, config: Mapping[str, Any] | None = None, *, plugins: Iterable[object] = (),
                 tools: Iterable[Any] = (), workspace: str | None = None) -> None:
        self.nexus = Nexus(dict(config) if config is not None else None, plugins=plugins, tools=tools,
                           workspace=workspace)

    def pid(self) -> int:
        """The actor's process: where the gates run."""
        return os.getpid()

    def node(self) -> str:
        """The id of the Ray node the actor runs on."""
        return str(ray.get_runtime_context().get_node_id())

    def tools(self) -> list[str]:
        return [tool.name for tool in self.nexus.tools()]

    def invoke(self, name: str, arguments: Mapping[str, Any] | None = None) -> ToolResult:
        """`Nexus.invoke` of tool `name`: its gates, approvals and ledger are the actor's."""
        return self.nexus.invoke(name, dict(arguments or {}))

    def run_code(self, script: str, **arguments: Any) -> ToolResult:
        """`run_code` with `script` (and its other arguments)."""
        return self.nexus.invoke("run_code", {"script": script, **arguments})

    def agent(self, prompt: str, **options: Any) -> Any:
        """One run of the agent plugin (`nexus.agent`, which needs a provider) on `prompt`: its
        `AgentResult`."""
        return self.nexus.plugin("nexus.agent").run(prompt, **options)

    def close(self) -> None:
        self.nexus.close()


#: its methods run one at a time (inner calls come over the relay, not as Ray calls); for calls at
#: once, `.options(max_concurrency=N)`
SessionActor = ray.remote(num_cpus=0, max_restarts=0)(NexusSession)
