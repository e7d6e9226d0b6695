"""An MCP server whose tools ask the client's user things (elicitation), for nexus_mcp's tests;
stdio. On a 2026-07-28 session a tool asks by returning an `InputRequiredResult` (the client
answers and calls again); on an older one by sending `elicitation/create` during the call. Each
tool returns what came back, as JSON: the action, the content and the response's `_meta`, or the
error the client answered with (an older session sees it; a 2026 client fails the call instead)."""

from __future__ import annotations

import json
from typing import Any

from mcp import MCPError
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitRequestURLParams, InputRequiredResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

server = MCPServer("elicit-fixture")


def _outcome(result: Any) -> dict[str, Any]:
    return dict(result.model_dump(mode="json", by_alias=True, exclude_none=True))


async def _ask(ctx: Context, params: ElicitRequestFormParams | ElicitRequestURLParams,
               state: str) -> dict[str, Any] | InputRequiredResult:
    """What the user answered `params`, or (2026) the request to ask it."""
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        answer = (ctx.input_responses or {}).get("q")
        if answer is None:
            return InputRequiredResult(input_requests={"q": ElicitRequest(params=params)}, request_state=state)
        return _outcome(answer)
    session = ctx.request_context.session
    try:
        if isinstance(params, ElicitRequestURLParams):
            result = await session.elicit_url(params.message, params.url, "elicitation-1",
                                              related_request_id=ctx.request_id)
        else:
            result = await session.elicit_form(params.message, params.requested_schema,
                                               related_request_id=ctx.request_id)
    except MCPError as exc:
        return {"error": exc.message, "code": exc.code}
    return _outcome(result)


@server.tool()
async def ask(message: str, schema: dict[str, Any], ctx: Context) -> str | InputRequiredResult:
    """Ask the user `message`, with a form of `schema`."""
    got = await _ask(ctx, ElicitRequestFormParams(message=message, requested_schema=schema), "ask")
    return got if isinstance(got, InputRequiredResult) else json.dumps(got, sort_keys=True)


@server.tool()
async def ask_url(message: str, url: str, ctx: Context) -> str | InputRequiredResult:
    """Send the user to `url`."""
    got = await _ask(ctx, ElicitRequestURLParams(message=message, url=url, elicitation_id="elicitation-1"), "url")
    return got if isinstance(got, InputRequiredResult) else json.dumps(got, sort_keys=True)


@server.tool()
async def ask_many(times: int, ctx: Context) -> str | InputRequiredResult:
    """Ask a yes/no question `times` times; what each got."""
    schema = {"type": "object", "properties": {"ok": {"type": "boolean", "default": True}}}
    params = ElicitRequestFormParams(message="again?", requested_schema=schema)
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        done = json.loads(ctx.request_state or "[]")
        answer = (ctx.input_responses or {}).get("q")
        if answer is not None:
            done.append(_outcome(answer)["action"])
        if len(done) < times:
            return InputRequiredResult(input_requests={"q": ElicitRequest(params=params)}, request_state=json.dumps(done))
        return json.dumps(done)
    outcomes = []
    for _ in range(times):
        got = await _ask(ctx, params, "")
        assert isinstance(got, dict)
        outcomes.append(got.get("action") or f"error: {got['error']}")
    return json.dumps(outcomes)


if __name__ == "__main__":
    server.run()
