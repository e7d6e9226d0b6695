"""Issue 21, item 5: `nexus mcp serve --http` is authenticated and rebinding-safe by default.

The issue's attack: any local user or process called `shell` on a served Nexus (uid 65534 ran
`id -u` and got 0), and served on 127.0.0.2, a name, or [::], a request with
`Host: attacker.example` and a foreign `Origin` ran tools (DNS rebinding from a web page).

Each attack here is the real `nexus mcp serve --http` (a distribution with the shell tool) and
raw HTTP requests as an attacker would write them: the 2026-era single request that runs a tool
at once, and the 2025-era session (initialize, then tools/call). Every attack tries to make
`shell` run `id -u > MARKER`; it must be refused with the status the protection gives, and the
marker must not appear. `test_the_token_lets_a_client_call_shell` is the control: the same
requests with everything right do run it.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from mcp_helpers import HttpServe, run_nexus

#: a valid token of a person's own (43 characters, as `secrets.token_urlsafe(32)` makes)
GIVEN_TOKEN = "Qm9vdHN0cmFwcGVkLXRva2VuLWZvci10aGUtdGVzdHM"
MODERN = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "shell"}
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}


def shell_distribution(folder: Path, serve: dict[str, Any] | None = None) -> tuple[Path, dict[str, str]]:
    """A config whose Nexus has the shell tool (and nothing that asks before it runs), and the
    environment to run `nexus` in."""
    workspace = folder / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    plugins: dict[str, Any] = {"active": ["nexus.tool.shell", "nexus.mcp.client"]}
    if serve is not None:
        plugins["nexus.mcp.client"] = {"serve": serve}
    config = folder / "nexus.yaml"
    config.write_text(yaml.safe_dump({"workspace": str(workspace), "session_dir": str(folder / "session"),
                                      "skills": [], "plugins": plugins}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    return config, env


class Attacker:
    """Raw HTTP to a served Nexus, every header under the caller's control."""

    def __init__(self, server: HttpServe, address: str) -> None:
        self.server = server
        self.address = address
        self.responses: list[tuple[int, dict[str, str], str]] = []

    def post(self, body: dict[str, Any], *, token: str | None, host: str | None, origin: str | None, path: str,
             headers: dict[str, str]) -> tuple[int, dict[str, str], str]:
        connection = http.client.HTTPConnection(self.address, self.server.port, timeout=60)
        try:
            connection.putrequest("POST", path, skip_host=True, skip_accept_encoding=True)
            data = json.dumps(body).encode()
            sent = {"Host": host if host is not None else authority(self.address, self.server.port),
                    "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                    "Content-Length": str(len(data)), **headers}
            if token is not None:
                sent["Authorization"] = token if " " in token else f"Bearer {token}"
            if origin is not None:
                sent["Origin"] = origin
            for name, value in sent.items():
                connection.putheader(name, value)
            connection.endheaders(data)
            response = connection.getresponse()
            answer = (response.status, {k.lower(): v for k, v in response.getheaders()},
                      response.read().decode(errors="replace"))
        finally:
            connection.close()
        self.responses.append(answer)
        return answer

    def call_shell(self, marker: Path, *, token: str | None = "", host: str | None = None,
                   origin: str | None = None, path: str = "/mcp") -> list[int]:
        """`shell` running `id -u > marker`, as one 2026-era request and through a 2025-era
        session. `token` "" means the server's own. The statuses of the requests made."""
        token = self.server.token if token == "" else token
        common: dict[str, Any] = {"token": token, "host": host, "origin": origin, "path": path}
        arguments = {"command": f"id -u > {marker}"}
        statuses = [self.post({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                               "params": {"name": "shell", "arguments": arguments, "_meta": META}},
                              headers=MODERN, **common)[0]]
        status, headers, _ = self.post(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}},
            headers={}, **common)
        statuses.append(status)
        if status == 200:
            session = {"Mcp-Session-Id": headers["mcp-session-id"]} if "mcp-session-id" in headers else {}
            session["MCP-Protocol-Version"] = "2025-06-18"
            self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session, **common)
            statuses.append(self.post({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                       "params": {"name": "shell", "arguments": arguments}},
                                      headers=session, **common)[0])
        return statuses


def authority(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


@pytest.fixture(scope="module", params=["127.0.0.2", "localhost", "127.0.0.2 --stateless"])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServe]:
    """`nexus mcp serve --http` on a loopback address that is not 127.0.0.1 (which the SDK's own
    check knew nothing of), on a name, and stateless."""
    host, *extra = request.param.split()
    config, env = shell_distribution(tmp_path_factory.mktemp("served"))
    server = HttpServe(config, env, *extra, host=host)
    yield server
    server.stop()


def bound_address(server: HttpServe) -> str:
    return server.url.split("//", 1)[1].rsplit(":", 1)[0].strip("[]")


@pytest.fixture
def attacker(served: HttpServe) -> Attacker:
    return Attacker(served, bound_address(served))


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "PWNED"


def refused(attacker: Attacker, marker: Path, status: int, **how: Any) -> list[tuple[int, dict[str, str], str]]:
    statuses = attacker.call_shell(marker, **how)
    assert statuses == [status, status], attacker.responses
    assert not marker.exists(), "shell ran"
    return attacker.responses


def test_the_token_lets_a_client_call_shell(attacker: Attacker, marker: Path) -> None:
    """The control: with the token, the right Host and no Origin, both kinds of request run it."""
    statuses = attacker.call_shell(marker)
    assert statuses[0] == 200 and statuses[-1] in (200, 202), attacker.responses
    assert marker.read_text().strip() == str(os.getuid())
    marker.unlink()
    statuses = attacker.call_shell(marker, origin=f"http://{authority(attacker.address, attacker.server.port)}")
    assert statuses[0] == 200 and marker.exists(), attacker.responses


def test_no_token(attacker: Attacker, marker: Path) -> None:
    for status, headers, body in refused(attacker, marker, 401, token=None):
        assert headers["www-authenticate"].startswith('Bearer error="invalid_token"'), headers
        assert json.loads(body)["error"] == "invalid_token"


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT", "OPTIONS"])
def test_every_method_needs_the_token(method: str, attacker: Attacker) -> None:
    """The 2025-era stream (GET), ending a session (DELETE), and whatever else the path takes."""
    connection = http.client.HTTPConnection(attacker.address, attacker.server.port, timeout=60)
    try:
        connection.request(method, "/mcp", headers={"Accept": "text/event-stream", "Mcp-Session-Id": "x" * 32})
        response = connection.getresponse()
        assert response.status == 401 and response.getheader("WWW-Authenticate", "").startswith("Bearer ")
    finally:
        connection.close()


@pytest.mark.parametrize("wrong", ["same length", "one more character", "one fewer character", "empty",
                                   "basic scheme", "the token without a scheme"])
def test_a_wrong_token(wrong: str, attacker: Attacker, marker: Path) -> None:
    token = attacker.server.token
    given = {"same length": token[:-1] + ("A" if token[-1] != "A" else "B"),
             "one more character": token + "x", "one fewer character": token[:-1], "empty": "Bearer ",
             "basic scheme": f"Basic {token}", "the token without a scheme": f"{token} "}[wrong]
    refused(attacker, marker, 401, token=given)


@pytest.mark.parametrize("query", ["?access_token={token}", "?token={token}", "?x=1&Access_Token={token}"])
def test_a_token_in_the_query_is_refused(query: str, attacker: Attacker, marker: Path) -> None:
    path = "/mcp" + query.format(token=attacker.server.token)
    refused(attacker, marker, 400, token=None, path=path)
    for status, headers, body in refused(attacker, marker, 400, path=path):  # with the header as well
        assert 'error="invalid_request"' in headers["www-authenticate"]
        assert "Authorization header" in json.loads(body)["error_description"]


def test_a_foreign_host_is_refused(attacker: Attacker, marker: Path) -> None:
    """DNS rebinding: the page's name resolves to the server's address; the browser sends its
    own name as Host. With the token, even: Host names what the client meant to reach."""
    port = attacker.server.port
    for host in ("attacker.example", f"attacker.example:{port}", f"{attacker.address}:{port + 1}", "",
                 f"127.0.0.3:{port}"):
        refused(attacker, marker, 421, host=host)
    if attacker.address == "127.0.0.2":  # neither another loopback address nor localhost is this one
        refused(attacker, marker, 421, host=f"127.0.0.1:{port}")
        refused(attacker, marker, 421, host=f"localhost:{port}")
    else:  # served as `localhost`: the name, and the address it stands for
        assert attacker.call_shell(marker, host=f"localhost:{port}")[0] == 200
        assert marker.exists()


def test_a_foreign_origin_with_the_token_is_refused(attacker: Attacker, marker: Path) -> None:
    port = attacker.server.port
    for origin in ("http://attacker.example", f"http://attacker.example:{port}", "null",
                   f"http://{authority(attacker.address, port + 1)}", f"https://{authority(attacker.address, port)}"):
        refused(attacker, marker, 403, origin=origin)


@pytest.mark.parametrize("address", ["0.0.0.0", "[::]"])
def test_an_address_other_machines_reach_needs_allow_remote(address: str, tmp_path: Path, marker: Path) -> None:
    if address == "[::]" and not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    config, env = shell_distribution(tmp_path)
    refusal = run_nexus("--config", str(config), "mcp", "serve", "--http", f"{address}:0", cwd=tmp_path, env=env)
    assert refusal.returncode == 2, refusal.stderr
    assert "not loopback" in refusal.stderr and "--allow-remote" in refusal.stderr
    assert "serving" not in refusal.stderr
    # with the flag it serves there, and everything above still holds
    server = HttpServe(config, env, "--allow-remote", host=address.strip("[]"))
    try:
        assert "bound to an address other machines reach (--allow-remote)" in "".join(server.stderr)
        attacker = Attacker(server, "127.0.0.1")
        refused(attacker, marker, 401, token=None)
        refused(attacker, marker, 421, host="attacker.example")
        refused(attacker, marker, 403, origin="http://attacker.example")
        assert attacker.call_shell(marker)[0] == 200 and marker.exists()  # the control
    finally:
        server.stop()


NOBODY = 65534


@pytest.mark.skipif(os.geteuid() != 0, reason="becoming another user needs root")
def test_another_local_user_cannot_call_shell(tmp_path: Path, marker: Path) -> None:
    """The issue's `id -u` attack, as uid 65534 on the same machine: a child of this process
    drops to it (setgid, setuid, no groups), then looks for the token where a local user could
    (the token file, the server's environment and command line) and calls `shell` without it."""
    config, env = shell_distribution(tmp_path)
    server = HttpServe(config, env, host="127.0.0.2")
    try:
        [token_file] = (tmp_path / "session" / "plugins" / "nexus.mcp.client").glob("serve-*.token")
        assert token_file.read_text().strip() == server.token
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600  # its owner alone, whatever the folders
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # the other user
            os.close(read)
            report: dict[str, Any] = {}
            try:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                report["uid"] = os.getuid()
                for name, path in (("token_file", token_file), ("environ", f"/proc/{server.process.pid}/environ")):
                    try:
                        report[name] = Path(path).read_bytes().decode(errors="replace")
                    except OSError as exc:
                        report[name] = type(exc).__name__
                report["cmdline"] = Path(f"/proc/{server.process.pid}/cmdline").read_bytes().decode(errors="replace")
                attacker = Attacker(server, "127.0.0.2")
                report["no token"] = attacker.call_shell(marker, token=None)
                report["a guess"] = attacker.call_shell(marker, token="0" * len(server.token))
            except BaseException as exc:  # noqa: BLE001 (reported to the test, which fails on it)
                report["error"] = repr(exc)
            os.write(write, json.dumps(report).encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            report = json.loads(pipe.read())
        os.waitpid(child, 0)
    finally:
        server.stop()
    assert "error" not in report, report
    assert report["uid"] == NOBODY
    assert report["token_file"] == "PermissionError" and report["environ"] == "PermissionError"
    assert server.token not in report["cmdline"]
    assert report["no token"] == [401, 401] and report["a guess"] == [401, 401]
    assert not marker.exists(), "uid 65534 ran shell"


def test_a_given_token_is_used_and_never_printed(tmp_path: Path, marker: Path) -> None:
    config, env = shell_distribution(tmp_path)
    server = HttpServe(config, {**env, "NEXUS_MCP_TOKEN": GIVEN_TOKEN}, host="127.0.0.2")
    try:
        stderr = "".join(server.stderr)
        assert GIVEN_TOKEN not in stderr
        assert "with the token from the environment variable NEXUS_MCP_TOKEN" in stderr
        assert not list((tmp_path / "session").glob("**/*.token"))  # a given token is not written anywhere
        attacker = Attacker(server, "127.0.0.2")
        refused(attacker, marker, 401, token=None)
        assert attacker.call_shell(marker, token=GIVEN_TOKEN)[0] == 200 and marker.exists()
    finally:
        _, stderr = server.stop()
    assert GIVEN_TOKEN not in stderr


def test_a_token_from_the_config_file(tmp_path: Path, marker: Path) -> None:
    secret = tmp_path / "token.txt"
    secret.write_text(GIVEN_TOKEN + "\n")
    config, env = shell_distribution(tmp_path, serve={"token_file": "token.txt"})
    server = HttpServe(config, env, host="127.0.0.2")
    try:
        assert f"plugins.nexus.mcp.client.serve.token_file ({secret})" in "".join(server.stderr)
        attacker = Attacker(server, "127.0.0.2")
        refused(attacker, marker, 401, token=None)
        assert attacker.call_shell(marker, token=GIVEN_TOKEN)[0] == 200
    finally:
        server.stop()


@pytest.mark.parametrize(("serve", "token", "message"), [
    ({}, "short", "the environment variable NEXUS_MCP_TOKEN: the token has 5 characters; give one of at least 32"),
    ({}, "x" * 40 + " y", "may hold only A-Z a-z 0-9"),
    ({"token": "${NEXUS_TEST_UNSET}"}, None,
     "plugins.nexus.mcp.client.serve.token: environment variable NEXUS_TEST_UNSET is not set"),
    ({"token_file": "missing.txt"}, None, "plugins.nexus.mcp.client.serve.token_file: cannot read"),
    ({"token": GIVEN_TOKEN, "token_file": "t"}, None, "give `token` or `token_file`, not both"),
    ({"tokens": "x"}, None, "plugins.nexus.mcp.client.serve.tokens"),
])
def test_a_token_that_will_not_do_is_refused_at_start(serve: dict[str, Any], token: str | None, message: str,
                                                      tmp_path: Path) -> None:
    config, env = shell_distribution(tmp_path, serve=serve)
    if token is not None:
        env["NEXUS_MCP_TOKEN"] = token
    proc = run_nexus("--config", str(config), "mcp", "serve", "--http", "127.0.0.1:0", cwd=tmp_path, env=env)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert "serving" not in proc.stderr


def test_the_sdk_client_connects_with_the_token(served: HttpServe) -> None:
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def session() -> None:
        transport = streamable_http_client(served.url, http_client=httpx2.AsyncClient(headers=served.headers))
        async with Client(transport, cache=None) as client:
            result = await client.call_tool("shell", {"command": "id -u"})
            assert not result.is_error and result.structured_content is not None
            assert result.structured_content["stdout"].strip() == str(os.getuid())

    anyio.run(session)


def test_doctor_lists_the_protections(tmp_path: Path) -> None:
    config, env = shell_distribution(tmp_path)
    doctor = run_nexus("--config", str(config), "doctor", cwd=tmp_path, env=env)
    out = doctor.stdout
    assert "mcp serve --http: a bearer token on every request" in out, out
    assert "Host and Origin checked against the address bound" in out
    assert "a non-loopback address needs --allow-remote" in out

