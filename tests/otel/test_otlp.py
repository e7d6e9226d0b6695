"""nexus.otel configured the standard way, by the OTEL_* variables, exporting over real
OTLP/HTTP to a receiver on loopback; and a trace carried across processes: a `nexus` process
whose MCP client calls a `nexus mcp serve` subprocess, both exporting, every span of one trace,
the server's spans children of the client's (trace context in `params._meta`, W3C
`traceparent`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from otlp_receiver import otlp_receiver

NEXUS = [sys.executable, "-m", "nexus_core"]


def otel_env(endpoint: str, service: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("OTEL_", "NEXUS_"))}
    env.update({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SERVICE_NAME": service,
                "OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_METRIC_EXPORT_INTERVAL": "60000"})
    return env


def write_config(path: Path, config: dict[str, object]) -> Path:
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def test_a_nexus_call_is_exported_over_otlp_http_when_an_endpoint_is_set(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "hello.txt").write_text("hello\n", encoding="utf-8")
    config = write_config(tmp_path / "nexus.yaml", {"workspace": str(workspace), "skills": [],
                                                    "session_dir": str(tmp_path / "sessions")})
    with otlp_receiver() as (endpoint, received):
        proc = subprocess.run([*NEXUS, "--config", str(config), "call", "read", json.dumps({"path": "hello.txt"})],
                              env=otel_env(endpoint, "cli"), capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert received.wait_for(lambda r: any(s.name == "execute_tool read" for _, s in r.spans)), received.posts
        assert received.wait_for(lambda r: ("cli", "gen_ai.execute_tool.duration") in r.metrics), received.metrics
    ((service, span),) = received.named("execute_tool read")
    assert service == "cli"
    attributes = {a.key: a.value.string_value for a in span.attributes}
    assert attributes["gen_ai.operation.name"] == "execute_tool" and attributes["gen_ai.tool.name"] == "read"


def test_an_mcp_clients_trace_is_continued_by_nexus_mcp_serve(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "hello.txt").write_text("hello from the server\n", encoding="utf-8")
    server_config = write_config(tmp_path / "server.yaml", {
        "workspace": str(workspace), "skills": [], "session_dir": str(tmp_path / "server-sessions")})
    with otlp_receiver() as (endpoint, received):
        server_env = {k: v for k, v in otel_env(endpoint, "server").items() if k.startswith("OTEL_")}
        client_config = write_config(tmp_path / "client.yaml", {
            "workspace": str(workspace), "skills": [], "session_dir": str(tmp_path / "client-sessions"),
            "plugins": {"active": ["nexus.mcp.client", "nexus.otel"], "nexus.mcp.client": {"servers": {"srv": {
                "command": sys.executable,
                "args": ["-m", "nexus_core", "--config", str(server_config), "mcp", "serve"],
                "env": server_env, "timeout_seconds": 120, "start_timeout_seconds": 240}}}}})
        proc = subprocess.run([*NEXUS, "--config", str(client_config), "call", "srv_read",
                               json.dumps({"path": "hello.txt"})],
                              env=otel_env(endpoint, "client"), capture_output=True, text=True, timeout=400)
        assert proc.returncode == 0, proc.stderr
        assert "hello from the server" in proc.stdout

        def both_sides(r: object) -> bool:
            names = {(service, span.name) for service, span in received.spans}
            return {("client", "execute_tool srv_read"), ("server", "execute_tool read")} <= names

        assert received.wait_for(both_sides), sorted({(s, span.name) for s, span in received.spans})
    by_id = {span.span_id: (service, span) for service, span in received.spans}
    ((_, client_call),) = received.named("execute_tool srv_read")
    ((_, server_call),) = received.named("execute_tool read")
    # one trace, across the hop
    assert server_call.trace_id == client_call.trace_id
    # the server's call, up its parents, reaches the client's call: server span (tools/call
    # read, the MCP SDK's, from the traceparent in params._meta) -> the client's MCP request
    # span -> the client's execute_tool span
    chain = []
    span = server_call
    while span.parent_span_id:
        service, span = by_id[span.parent_span_id]
        chain.append((service, span.name))
    assert chain[-1] == ("client", "execute_tool srv_read"), chain
    assert ("server", "tools/call read") in chain, chain
    server_span = next(s for svc, s in received.spans if svc == "server" and s.name == "tools/call read")
    attributes = {a.key: a.value.string_value for a in server_span.attributes}
    assert attributes["mcp.method.name"] == "tools/call" and attributes.get("jsonrpc.request.id")
    assert by_id[server_span.parent_span_id][0] == "client"


@pytest.mark.parametrize("variable, value, message", [
    ("OTEL_TRACES_EXPORTER", "zipkin_json", "OTEL_TRACES_EXPORTER asks for the exporter 'zipkin_json'"),
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "opentelemetry-exporter-otlp-proto-grpc"),
])
def test_an_exporter_that_is_not_installed_is_a_config_error(tmp_path: Path, variable: str, value: str,
                                                              message: str) -> None:
    (tmp_path / "workspace").mkdir()
    config = write_config(tmp_path / "nexus.yaml", {"workspace": str(tmp_path / "workspace"), "skills": []})
    env = otel_env("http://127.0.0.1:9", "cli")
    env[variable] = value
    proc = subprocess.run([*NEXUS, "--config", str(config), "tools"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "plugins.nexus.otel" in proc.stderr and message in proc.stderr


def test_a_served_request_names_its_mcp_session(tmp_path: Path) -> None:
    """Over streamable HTTP with a session (a 2025-era client), the server's span of each request
    carries `mcp.session.id`; two clients, two sessions."""
    import re

    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "hello.txt").write_text("hello\n", encoding="utf-8")
    config = write_config(tmp_path / "server.yaml", {"workspace": str(workspace), "skills": [],
                                                     "session_dir": str(tmp_path / "sessions")})
    with otlp_receiver() as (endpoint, received):
        env = {**otel_env(endpoint, "server"), "NEXUS_MCP_TOKEN": "t0ken-for-the-test-0123456789abcdef"}
        server = subprocess.Popen([*NEXUS, "--config", str(config), "mcp", "serve", "--http", "127.0.0.1:0"],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert server.stderr is not None
            url = ""
            for line in server.stderr:
                if found := re.search(r"over MCP at (http://\S+)", line):
                    url = found.group(1)
                if url and line.startswith("nexus: protection: bound to"):
                    break
            assert url, "nexus mcp serve --http did not start"

            async def two_sessions() -> None:
                for _ in range(2):
                    transport = streamable_http_client(url, http_client=httpx2.AsyncClient(
                        headers={"Authorization": f"Bearer {env['NEXUS_MCP_TOKEN']}"}))
                    async with Client(transport, cache=None, mode="legacy") as client:
                        for _ in range(2):
                            assert not (await client.call_tool("read", {"path": "hello.txt"})).is_error

            anyio.run(two_sessions)
        finally:
            server.terminate()
            server.communicate(timeout=60)
        assert received.wait_for(lambda r: len(r.named("tools/call read")) == 4), received.posts
    sessions = [{a.key: a.value.string_value for a in span.attributes}.get("mcp.session.id")
                for _, span in sorted(received.named("tools/call read"), key=lambda pair: pair[1].start_time_unix_nano)]
    assert all(sessions) and sessions[0] == sessions[1] and sessions[2] == sessions[3] and sessions[0] != sessions[2]
