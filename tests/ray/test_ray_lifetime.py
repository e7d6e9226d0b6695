"""Issue 27: nothing outlives. A node's pool actor starts the machine pool server of its node
watching the actor's pid (`--watch-pid`, a pidfd): the actor killed (`ray.kill`), or the cluster
shut down, ends the server and its zygotes, not pool_idle_seconds later. A cluster of its own
(a head and a worker node), shut down inside the test."""

from __future__ import annotations

import os
import sys
import time

import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from nexus_core.testing import NexusFactory  # noqa: E402
from nexus_ray import launcher as remote  # noqa: E402

pytestmark = [pytest.mark.ray,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")]

CE = "nexus.tool.code_exec"
WAIT = 90.0


def pool_servers(folders: list[str]) -> list[int]:
    """The pids of the pool server processes serving one of `folders` (read from /proc)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"nexus_tool_code_exec.poolserver" in argv and b"--folder" in argv:
            folder = argv[argv.index(b"--folder") + 1].decode(errors="replace")
            if folder in folders:
                pids.append(int(entry))
    return pids


def wait_gone(folders: list[str], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while pool_servers(folders):
        assert time.monotonic() < deadline, f"a pool server outlived {what}: {pool_servers(folders)}"
        time.sleep(0.2)


def test_a_pool_server_ends_with_its_actor_and_with_the_cluster(nexus_factory: NexusFactory) -> None:
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    c.add_node(num_cpus=1)
    c.wait_for_nodes(timeout=120)
    ray.init(address=c.address, namespace=remote.NAMESPACE, log_to_driver=False)
    folders: list[str] = []
    try:
        nx = nexus_factory(plugins=[CE], config={"plugins": {CE: {"launcher": "ray", "timeout_seconds": 60}}})
        (node,) = remote.worker_nodes()
        folders.append(os.path.join(f"/tmp/nexus-ray-{os.getuid()}", node[:16]))
        run = nx.invoke("run_code", {"script": "def run(ctx):\n    return 1\n"})
        assert run.error is None, run.output
        assert len(pool_servers(folders)) == 1
        ray.kill(ray.get_actor(f"nexus-pool-{node}", namespace=remote.NAMESPACE))
        wait_gone(folders, "its pool actor (ray.kill)")
        again = nx.invoke("run_code", {"script": "def run(ctx):\n    return 2\n"})  # a new actor, a new server
        assert again.error is None, again.output
        assert len(pool_servers(folders)) == 1
    finally:
        ray.shutdown()
        c.shutdown()
    wait_gone(folders, "the cluster's shutdown")
