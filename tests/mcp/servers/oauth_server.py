"""An MCP server that is its own OAuth authorization server, for nexus_mcp's login tests: the MCP
SDK's `MCPServer` with its auth routes (`create_auth_routes`: metadata, dynamic registration,
/authorize, /token with PKCE checks, /revoke) over an in-memory provider of ours. Streamable HTTP
on 127.0.0.1:PORT.

The person "approves" at once: /authorize redirects straight back with a code, so whatever
visits the authorization URL (the test's stand-in for a browser) completes the login. Routes for
the test, not for clients: `POST /test/revoke` revokes every token; `GET /test/grants` lists the
grants made (`authorization_code`, `refresh_token`) and how many clients registered.

    python oauth_server.py PORT
"""

from __future__ import annotations

import secrets
import sys
import time

import anyio
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

SCOPE = "tools"


class Provider:
    """Clients, codes and tokens in dicts; every grant recorded for the test to see."""

    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.grants: list[str] = []

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code, scopes=params.scopes or [SCOPE], expires_at=time.time() + 300,
            client_id=client.client_id or "", code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri, redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource)
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client: OAuthClientInformationFull, code: str) -> AuthorizationCode | None:
        return self.codes.get(code)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access, refresh = f"access-{secrets.token_urlsafe(16)}", f"refresh-{secrets.token_urlsafe(16)}"
        self.access[access] = AccessToken(token=access, client_id=client_id, scopes=scopes,
                                          expires_at=int(time.time()) + 3600, resource=resource)
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes, resource=resource)
        return OAuthToken(access_token=access, expires_in=3600, scope=" ".join(scopes), refresh_token=refresh)

    async def exchange_authorization_code(self, client: OAuthClientInformationFull,
                                          code: AuthorizationCode) -> OAuthToken:
        del self.codes[code.code]
        self.grants.append("authorization_code")
        return self._issue(code.client_id, code.scopes, code.resource)

    async def load_refresh_token(self, client: OAuthClientInformationFull, token: str) -> RefreshToken | None:
        return self.refresh.get(token)

    async def exchange_refresh_token(self, client: OAuthClientInformationFull, token: RefreshToken,
                                     scopes: list[str]) -> OAuthToken:
        del self.refresh[token.token]  # rotated
        self.grants.append("refresh_token")
        return self._issue(token.client_id, scopes or token.scopes, token.resource)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        return found if found is not None and (found.expires_at or 0) > time.time() else None

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)


def main() -> None:
    port = int(sys.argv[1])
    base = f"http://127.0.0.1:{port}"
    provider = Provider()
    server = MCPServer(
        "oauth-fixture", auth_server_provider=provider,
        auth=AuthSettings(issuer_url=base, resource_server_url=f"{base}/mcp", validate_token_resource=False,
                          client_registration_options=ClientRegistrationOptions(enabled=True, valid_scopes=[SCOPE],
                                                                                default_scopes=[SCOPE]),
                          revocation_options=RevocationOptions(enabled=True), required_scopes=[SCOPE]))

    @server.tool()
    def whoami() -> str:
        """Who the token says is calling."""
        token = get_access_token()
        return f"client {token.client_id} with scopes {' '.join(token.scopes)}" if token else "nobody"

    @server.custom_route("/test/revoke", methods=["POST"])
    async def revoke(request: Request) -> Response:
        provider.access.clear()
        provider.refresh.clear()
        return JSONResponse({"revoked": True})

    @server.custom_route("/test/grants", methods=["GET"])
    async def grants(request: Request) -> Response:
        return JSONResponse({"grants": provider.grants, "clients": len(provider.clients)})

    anyio.run(lambda: server.run_streamable_http_async(host="127.0.0.1", port=port))


if __name__ == "__main__":
    main()
