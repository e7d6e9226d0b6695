"""OAuth for a remote MCP server, against a real authorization server on loopback
(servers/oauth_server.py: the MCP SDK's auth routes over an in-memory provider): `nexus mcp login`
catching the redirect on its own loopback port, a call with the kept token, a refresh when it has
expired, a revoked token's clear error, `nexus mcp logout`, and where the tokens may live."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import yaml
from mcp_helpers import BIN, SERVERS, mcp_config, wait_for
from nexus_mcp._auth import AUTH_DIR_ENV, login, storage_for
from nexus_mcp._settings import parse_servers
from test_client_http import free_port, listening

from nexus_core import ConfigError, Nexus


class OAuthServer:
    def __init__(self, log: Path) -> None:
        self.port = free_port()
        with open(log, "ab") as out:
            self.process = subprocess.Popen([sys.executable, str(SERVERS / "oauth_server.py"), str(self.port)],
                                            stdout=out, stderr=out)
        wait_for(lambda: listening(self.port), what=f"the OAuth fixture server on port {self.port}")

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/mcp"

    def grants(self) -> list[str]:
        return list(httpx2.get(f"{self.base}/test/grants", timeout=30).json()["grants"])

    def revoke_all(self) -> None:
        httpx2.post(f"{self.base}/test/revoke", timeout=30).raise_for_status()

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.fixture
def oauth_server(tmp_path: Path) -> Iterator[OAuthServer]:
    server = OAuthServer(tmp_path / "oauth-server.log")
    yield server
    server.stop()


@pytest.fixture
def auth_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "user-state" / "mcp-oauth"
    monkeypatch.setenv(AUTH_DIR_ENV, str(folder))
    return folder


def browser(url: str) -> None:
    """The person's browser: the authorization server approves at once and redirects to the
    login's loopback listener, which this follows."""
    response = httpx2.get(url, follow_redirects=True, timeout=30)
    assert response.status_code == 200, response.text


def config_for(tmp_path: Path, server: OAuthServer, **oauth: Any) -> dict[str, Any]:
    return mcp_config(tmp_path, {"docs": {"url": server.url, "oauth": oauth or True}})


def log_in(tmp_path: Path, config: dict[str, Any]) -> list[str]:
    with Nexus({**config, "plugins": {"active": []}}) as bare:
        parsed = parse_servers(config["plugins"]["nexus.mcp.client"], bare)[0]
    return anyio.run(lambda: login(parsed, browser, timeout=60))


def token_file(auth_dir: Path) -> Path:
    files = list(auth_dir.glob("docs-*.json"))
    assert len(files) == 1, files
    return files[0]


def test_a_server_needing_a_login_says_so_and_is_not_started(tmp_path: Path, oauth_server: OAuthServer,
                                                             auth_dir: Path) -> None:
    with Nexus(config_for(tmp_path, oauth_server)) as nx:
        (status,) = _status(nx)
        assert status.error == ("MCP server 'docs' needs a login: run `nexus mcp login docs` (it opens the "
                                "server's sign-in page in your browser)")
        assert status.running is False
        doctor = nx.plugin("nexus.mcp.client").nexus_doctor()
        assert f"error: {status.error}" in doctor
        assert any(line.startswith("MCP OAuth tokens: one 0600 file per server in ") for line in doctor)
    assert oauth_server.grants() == []


def _status(nx: Nexus) -> list[Any]:
    return list(nx.plugin("nexus.mcp.client").status())


def test_nexus_mcp_login_on_the_command_line_then_a_call_with_the_kept_token(
        tmp_path: Path, oauth_server: OAuthServer, auth_dir: Path) -> None:
    config_file = tmp_path / "agent.yaml"
    config_file.write_text(yaml.safe_dump(config_for(tmp_path, oauth_server)))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, AUTH_DIR_ENV: str(auth_dir)}
    process = subprocess.Popen([str(BIN / "nexus"), "--config", str(config_file), "mcp", "login", "docs",
                                "--no-browser", "--timeout", "120"], cwd=elsewhere, env=env,
                               stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    lines = []
    for line in process.stderr:
        lines.append(line)
        if line.startswith(f"{oauth_server.base}/authorize?"):
            browser(line.strip())
            break
    rest = process.stderr.read()
    assert process.wait(timeout=120) == 0, "".join(lines) + rest
    assert "nexus: logged in to MCP server 'docs' (1 tools)" in rest
    assert "code_challenge_method=S256" in lines[-1]  # PKCE
    assert "redirect_uri=http%3A%2F%2F127.0.0.1%3A" in lines[-1]  # a loopback listener of its own

    path = token_file(auth_dir)
    kept = json.loads(path.read_text())
    access = kept["tokens"]["access_token"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(auth_dir.stat().st_mode) == 0o700
    assert access not in "".join(lines) + rest and kept["tokens"]["refresh_token"] not in "".join(lines) + rest

    with Nexus(config_for(tmp_path, oauth_server)) as nx:
        result = nx.invoke("docs_whoami", {})
        assert result.error is None, result.error
        assert result.output.startswith("client ") and result.output.endswith("with scopes tools")
    assert oauth_server.grants() == ["authorization_code"]
    session = Path(config_for(tmp_path, oauth_server)["session_dir"])
    for file in [p for p in session.rglob("*") if p.is_file()] + [p for p in tmp_path.rglob("*.log")]:
        assert access not in file.read_text(errors="replace"), f"the access token is in {file}"

    logout = subprocess.run([str(BIN / "nexus"), "--config", str(config_file), "mcp", "logout", "docs"],
                            cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert logout.returncode == 0, logout.stderr
    assert "logged out of MCP server 'docs'" in logout.stderr
    assert not path.exists()


def test_an_expired_token_is_refreshed(tmp_path: Path, oauth_server: OAuthServer, auth_dir: Path) -> None:
    config = config_for(tmp_path, oauth_server)
    assert log_in(tmp_path, config) == ["whoami"]
    path = token_file(auth_dir)
    before = json.loads(path.read_text())
    path.write_text(json.dumps({**before, "expires_at": 1.0}))  # it expired between two runs
    with Nexus(config) as nx:
        result = nx.invoke("docs_whoami", {})
        assert result.error is None, result.error
    after = json.loads(path.read_text())
    assert oauth_server.grants() == ["authorization_code", "refresh_token"]
    assert after["tokens"]["access_token"] != before["tokens"]["access_token"]
    assert after["expires_at"] > 1.0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_revoked_token_is_a_clear_error_naming_the_login_command(tmp_path: Path, oauth_server: OAuthServer,
                                                                   auth_dir: Path) -> None:
    config = config_for(tmp_path, oauth_server)
    log_in(tmp_path, config)
    with Nexus(config) as nx:
        assert nx.invoke("docs_whoami", {}).error is None
        oauth_server.revoke_all()
        result = nx.invoke("docs_whoami", {})
    assert result.error is not None
    assert "MCP server 'docs' needs a login" in result.error
    assert "run `nexus mcp login docs`" in result.error
    assert "'whoami' was not called" in result.error
    assert oauth_server.grants() == ["authorization_code"]  # no browser was opened, no login made behind the user's back


def test_the_tokens_are_never_kept_inside_the_workspace(tmp_path: Path, oauth_server: OAuthServer,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    config = config_for(tmp_path, oauth_server)
    inside = Path(config["workspace"]) / ".tokens"
    monkeypatch.setenv(AUTH_DIR_ENV, str(inside))
    with Nexus(config) as nx:
        (status,) = _status(nx)
    assert status.error == (f"MCP server 'docs' cannot log in: the OAuth token folder {inside} is inside the "
                            f"workspace {Path(config['workspace']).resolve()}, where tools can read it: set "
                            f"{AUTH_DIR_ENV} to a folder outside it")
    config_file = tmp_path / "agent.yaml"
    config_file.write_text(yaml.safe_dump(config))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    refused = subprocess.run([str(BIN / "nexus"), "--config", str(config_file), "mcp", "login", "docs",
                              "--no-browser"], cwd=elsewhere, capture_output=True, text=True, timeout=120,
                             env={**os.environ, AUTH_DIR_ENV: str(inside)}, check=False)
    assert refused.returncode == 2, refused.stderr
    assert f"the OAuth token folder {inside} is inside the workspace" in refused.stderr
    assert not inside.exists()


def test_oauth_settings_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as stdio:
        Nexus(mcp_config(tmp_path, {"local": {"command": "x", "oauth": True}}))
    assert "plugins.nexus.mcp.client.servers.local.oauth: not a setting of a stdio server" in str(stdio.value)
    with pytest.raises(ConfigError) as both:
        Nexus(mcp_config(tmp_path, {"docs": {"url": "https://x.example/mcp", "oauth": True,
                                             "headers": {"Authorization": "Bearer x"}}}))
    assert "an Authorization header and `oauth` both say how to log in" in str(both.value)
    with pytest.raises(ConfigError) as port:
        Nexus(mcp_config(tmp_path, {"docs": {"url": "https://x.example/mcp", "oauth": {"callback_port": 0}}}))
    assert "callback_port" in str(port.value)


def test_the_token_file_belongs_to_one_server_url(tmp_path: Path, auth_dir: Path) -> None:
    def storage(url: str) -> Any:
        with Nexus(mcp_config(tmp_path, {}, active=[])) as bare:
            (parsed,) = parse_servers({"servers": {"docs": {"url": url, "oauth": True}}}, bare)
        return storage_for(parsed)

    one, other = storage("https://a.example/mcp"), storage("https://b.example/mcp")
    assert one.path != other.path and one.path.parent == other.path.parent == auth_dir
    one.update(tokens={"access_token": "a", "token_type": "Bearer"})
    assert one.has_tokens() and not other.has_tokens()
    other.path.write_text(one.path.read_text())  # a file copied under another server's name is not used
    assert not other.has_tokens()


def test_a_login_that_fails_keeps_the_tokens_kept_and_one_that_works_replaces_them(
        tmp_path: Path, oauth_server: OAuthServer, auth_dir: Path) -> None:
    config = config_for(tmp_path, oauth_server)
    log_in(tmp_path, config)
    path = token_file(auth_dir)
    before = json.loads(path.read_text())["tokens"]
    with Nexus({**config, "plugins": {"active": []}}) as bare:
        parsed = parse_servers(config["plugins"]["nexus.mcp.client"], bare)[0]
    shown: list[str] = []
    # the person never signs in; the login's wait must outlast discovery and registration (which
    # come first, and show the URL) on a busy machine, so it is not short
    with pytest.raises(TimeoutError):
        anyio.run(lambda: login(parsed, shown.append, timeout=15))
    assert shown and shown[0].startswith(f"{oauth_server.base}/authorize?")
    assert json.loads(path.read_text())["tokens"] == before
    with Nexus(config) as nx:
        assert nx.invoke("docs_whoami", {}).error is None

    log_in(tmp_path, config)
    after = json.loads(path.read_text())["tokens"]
    assert after["access_token"] != before["access_token"]
    assert oauth_server.grants() == ["authorization_code", "authorization_code"]
