"""Issue 27: `nexus mcp serve --http --stateless` scales out as plain processes. Two replicas (two
processes, each its own config and session folder, one shared token) behind a loopback
round-robin proxy (token_proxy.TokenProxy with two upstreams); one MCP SDK client's calls are
answered by both, each request by whichever replica the proxy sends it to (docs/scale-out.md)."""

from __future__ import annotations

import secrets
from pathlib import Path

import anyio
import httpx2
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_helpers import FakePlugins, HttpServe
from token_proxy import TokenProxy

WHOAMI = '''
import os

from nexus_core import hookimpl, tool


@tool
def whoami() -> dict:
    """The pid of the server process that answers."""
    return {"pid": os.getpid()}


@hookimpl
def nexus_register_tools(register):
    register(whoami)
'''


def test_two_stateless_replicas_behind_a_round_robin_proxy_answer_one_client(tmp_path: Path) -> None:
    fakes = FakePlugins(tmp_path / "site")
    fakes.add("test.whoami", "nexus_test_whoami", WHOAMI)
    env = {**fakes.env(), "NEXUS_MCP_TOKEN": secrets.token_urlsafe(32)}
    replicas = []
    try:
        for i in range(2):
            config = tmp_path / f"replica{i}.yaml"
            config.write_text(yaml.safe_dump({"workspace": str(tmp_path), "session_dir": str(tmp_path / f"session{i}"),
                                              "skills": [], "plugins": {"active": ["test.whoami"]}}))
            replicas.append(HttpServe(config, env, "--stateless"))
        with TokenProxy([r.port for r in replicas], env["NEXUS_MCP_TOKEN"]) as proxy:
            pids: list[int] = []

            async def calls() -> None:
                async with Client(streamable_http_client(proxy.url, http_client=httpx2.AsyncClient()),
                                  cache=None) as client:
                    assert "whoami" in {t.name for t in (await client.list_tools()).tools}
                    for _ in range(6):
                        result = await client.call_tool("whoami", {})
                        assert not result.is_error, result
                        assert isinstance(result.structured_content, dict)
                        pids.append(int(result.structured_content["pid"]))

            anyio.run(calls)
        assert set(pids) == {r.process.pid for r in replicas}, (pids, [r.process.pid for r in replicas])
    finally:
        for replica in replicas:
            _, stderr = replica.stop()
            assert replica.process.returncode == 0, stderr


