"""The pieces of nexus_mcp that need no server: inlining `$ref`s, `${VAR}` expansion, result
conversion, `--http HOST:PORT`; and the package installed on its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp_helpers import SERVERS
from nexus_core.cli import UsageError
from nexus_core.content import ResourceContent, TextContent
from nexus_mcp._cli import parse_host_port
from nexus_mcp._convert import to_call_tool_result, to_toolresult
from nexus_mcp._names import nexus_tool_name, python_name
from nexus_mcp._schema import inline_refs
from nexus_mcp._settings import expand

from nexus_core import ToolResult


def test_a_schema_without_definitions_is_unchanged() -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}}
    assert inline_refs(schema) is schema


def test_definitions_are_inlined_through_chains_and_both_keywords() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"$ref": "#/$defs/A"},
            "old": {"$ref": "#/definitions/Old"},
            "remote": {"$ref": "https://example.com/schema.json"},
            "dangling": {"$ref": "#/$defs/Nope"},
        },
        "$defs": {"A": {"type": "object", "properties": {"b": {"$ref": "#/$defs/B"}}},
                  "B": {"type": "integer", "minimum": 0}},
        "definitions": {"Old": {"type": "string"}},
    }
    assert inline_refs(schema) == {
        "type": "object",
        "properties": {
            "a": {"type": "object", "properties": {"b": {"type": "integer", "minimum": 0}}},
            "old": {"type": "string"},
            "remote": {"$ref": "https://example.com/schema.json"},  # not ours to fetch
            "dangling": {"$ref": "#/$defs/Nope"},
        },
    }


def test_keywords_beside_a_ref_are_kept() -> None:
    schema = {"properties": {"x": {"$ref": "#/$defs/N", "description": "the x"},
                             "y": {"$ref": "#/$defs/N", "maximum": 5}},
              "$defs": {"N": {"type": "number", "maximum": 10}}}
    assert inline_refs(schema)["properties"] == {
        "x": {"type": "number", "maximum": 10, "description": "the x"},
        "y": {"allOf": [{"type": "number", "maximum": 10}], "maximum": 5},  # both limits hold
    }


def test_recursive_definitions_stay_with_what_they_need() -> None:
    schema = {
        "type": "object",
        "properties": {"root": {"$ref": "#/$defs/A"}, "leaf": {"$ref": "#/$defs/Leaf"}},
        "$defs": {
            "A": {"type": "object", "properties": {"b": {"$ref": "#/$defs/B"}, "leaf": {"$ref": "#/$defs/Leaf"}}},
            "B": {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}},  # A -> B -> A
            "Leaf": {"type": "string"},
            "Unused": {"type": "null"},
        },
    }
    out = inline_refs(schema)
    assert out["properties"] == {"root": {"$ref": "#/$defs/A"}, "leaf": {"type": "string"}}
    assert out["$defs"] == {
        "A": {"type": "object", "properties": {"b": {"$ref": "#/$defs/B"}, "leaf": {"type": "string"}}},
        "B": {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}},
    }
    root = {"$ref": "#/$defs/Node", "$defs": {"Node": {"type": "object",
                                                          "properties": {"next": {"$ref": "#/$defs/Node"}}}}}
    assert inline_refs(root) == root


def test_a_schema_that_would_explode_is_left_as_it_was() -> None:
    # each level refers to the next twice: inlined, 40 levels would make 2**40 objects
    defs: dict[str, Any] = {f"L{i}": {"type": "object", "properties": {"a": {"$ref": f"#/$defs/L{i + 1}"},
                                                                       "b": {"$ref": f"#/$defs/L{i + 1}"}}}
                            for i in range(40)}
    defs["L40"] = {"type": "string"}
    schema = {"type": "object", "properties": {"top": {"$ref": "#/$defs/L0"}}, "$defs": defs}
    assert inline_refs(schema) is schema
    small = {"type": "object", "properties": {"top": {"$ref": "#/$defs/L35"}}, "$defs": defs}
    assert "$ref" not in json.dumps(inline_refs(small))  # 5 levels: 63 objects, inlined


def test_expand() -> None:
    environ = {"TOKEN": "abc", "EMPTY": ""}
    assert expand("Bearer ${TOKEN}", "k", environ) == "Bearer abc"
    assert expand("${EMPTY}x$${TOKEN}$5", "k", environ) == "x${TOKEN}$5"
    with pytest.raises(ValueError, match=r"^servers.x.env.A: environment variable NOPE is not set"):
        expand("${NOPE}", "servers.x.env.A", environ)
    with pytest.raises(ValueError, match=r"\$\{TOKEN-x\} is not a variable name"):
        expand("${TOKEN-x}", "k", environ)


def test_tool_names() -> None:
    assert nexus_tool_name("time", "get_current_time") == "time_get_current_time"
    assert nexus_tool_name("docs", "search.pages v2") == "docs_search_pages_v2"
    assert len(nexus_tool_name("s", "x" * 100)) == 64
    assert nexus_tool_name("", "create_issue") == "create_issue"  # prefix: ""
    # what run_code's bindings make of them
    assert python_name("github_enterprise-create_issue") == python_name("github_enterprise_create_issue")
    assert python_name("9lives") == "_9lives" and python_name("import") == "import_"


def test_results_both_ways(tmp_path: Path) -> None:
    mcp_result = types.CallToolResult(
        content=[types.TextContent(type="text", text="see"),
                 types.EmbeddedResource(type="resource", resource=types.TextResourceContents(uri="file:///a", text="A"))],
        structured_content={"k": 1})
    result = to_toolresult("srv", "t", mcp_result)
    assert result.output == "see\nA" and result.output_structured == {"k": 1}
    assert result.content == (TextContent("see"), ResourceContent("file:///a", text="A"))
    # served again, the blocks pass through, and the structured result's JSON is added as text
    served = to_call_tool_result(result)
    assert served.structured_content == {"k": 1}
    assert [c.type for c in served.content] == ["text", "resource", "text"]
    assert served.content[0].text == "see" and served.content[2].text == '{"k": 1}'  # type: ignore[union-attr]
    assert served.content[1].resource.text == "A"  # type: ignore[union-attr]
    plain = to_call_tool_result(to_toolresult("srv", "t", types.CallToolResult(
        content=[types.TextContent(type="text", text="only text")])))
    assert [(c.type, c.text) for c in plain.content] == [("text", "only text")]  # type: ignore[union-attr]

    empty_error = to_toolresult("srv", "t", types.CallToolResult(content=[], is_error=True))
    assert empty_error.error == "MCP server 'srv' reported an error from tool 't' (no message)"

    out = tmp_path / "out.txt"
    out.write_text("file body", encoding="utf-8")
    plain = to_call_tool_result(ToolResult(id="1", name="x", output="hello", output_structured=[1, 2],
                                           output_file=str(out)))
    assert plain.structured_content is None  # not an object: MCP's structuredContent cannot hold it
    assert plain.content[0].text == "hello"  # type: ignore[union-attr]
    assert plain.content[1].type == "resource" and plain.content[1].resource.text == "file body"  # type: ignore[union-attr]
    vetoed = to_call_tool_result(ToolResult(id="1", name="x", output="vetoed: no", error="vetoed: no",
                                            error_kind="vetoed", output_structured={"a": 1}))
    assert vetoed.is_error and vetoed.structured_content is None and vetoed.content[0].text == "vetoed: no"  # type: ignore[union-attr]


@pytest.mark.parametrize(("value", "expected"), [
    ("127.0.0.1:8000", ("127.0.0.1", 8000)), ("0.0.0.0:0", ("0.0.0.0", 0)), ("[::1]:9", ("::1", 9)),
    ("localhost:65535", ("localhost", 65535)),
])
def test_host_port(value: str, expected: tuple[str, int]) -> None:
    assert parse_host_port(value) == expected


@pytest.mark.parametrize("value", ["8000", "host:", ":80", "::1:80", "h:65536", "h:http"])
def test_bad_host_port(value: str) -> None:
    with pytest.raises(UsageError, match="--http"):
        parse_host_port(value)


@pytest.mark.slow
def test_installs_alone_beside_nexus_core(fresh_venv: Any, tmp_path: Path) -> None:
    venv = fresh_venv("nexus-rt-core", "nexus-rt-mcp")
    config = tmp_path / "nexus.yaml"
    config.write_text(json.dumps({
        "workspace": ".",
        "plugins": {"nexus.mcp.client": {"servers": {
            "fx": {"command": str(venv.python), "args": [str(SERVERS / "fixture_server.py")]}}}},
    }))
    tools = venv.run("nexus", "--trust-config", "--config", str(config), "tools", cwd=tmp_path)
    assert tools.returncode == 0, tools.stderr
    assert "fx_echo" in tools.stdout and "nexus.mcp.client" in tools.stdout
    call = venv.run("nexus", "--trust-config", "--config", str(config), "call", "fx_segment", '{"x1": 0, "y1": 0, "x2": 3, "y2": 4}',
                    cwd=tmp_path)
    assert call.returncode == 0, call.stderr
    assert json.loads(call.stdout)["length"] == 5.0
    served = venv.run("nexus", "--trust-config", "--config", str(config), "mcp", "serve", cwd=tmp_path, input="", timeout=120)
    assert served.returncode == 0 and served.stdout == "", served.stderr  # stdin ended at once: a clean exit


def test_loopback_and_the_names_a_bound_address_answers_to(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nexus_mcp import _http_security as security

    assert all(security.is_loopback(a) for a in ("127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1"))
    assert not any(security.is_loopback(a) for a in ("0.0.0.0", "::", "10.0.0.1", "::ffff:10.0.0.1"))
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.2 nexus-alias other-alias  # a comment\n10.1.2.3 elsewhere\nbroken line\n")
    monkeypatch.setattr(security, "HOSTS_FILE", hosts)
    # the address, the name it was given as, and the hosts file's names; never another name
    assert security.local_names("127.0.0.2", "127.0.0.2") == ["127.0.0.2", "nexus-alias", "other-alias"]
    assert security.local_names("127.0.0.2", "nexus-alias") == ["127.0.0.2", "nexus-alias", "other-alias"]
    with pytest.raises(security.BindRefused, match="--allow-remote"):
        security.listen("0.0.0.0", 0, allow_remote=False)
    with pytest.raises(security.BindRefused, match="does not resolve"):
        security.listen("no-such-host.invalid", 0, allow_remote=False)
    sock = security.listen("127.0.0.2", 0, allow_remote=False)
    try:
        assert not sock.get_inheritable()  # no child process of a tool holds the port
        found = security.HttpSecurity.for_socket(sock, given_host="127.0.0.2", token=security.generate_token(),
                                                 allowed_hosts=["proxy.example"], allowed_origins=["https://app.example"])
        port = sock.getsockname()[1]
        assert found.allowed_hosts[0] == f"127.0.0.2:{port}" and "proxy.example" in found.allowed_hosts
        assert f"http://127.0.0.2:{port}" in found.allowed_origins and "https://app.example" in found.allowed_origins
        assert found.url == f"http://127.0.0.2:{port}/mcp" and found.loopback
    finally:
        sock.close()


def test_the_token_verifier() -> None:
    import anyio
    from nexus_mcp._http_security import StaticTokenVerifier, checked_token, generate_token

    token = generate_token()
    assert len(token.value) >= 32 and token.value not in repr(token)
    verifier = StaticTokenVerifier(token)

    async def check() -> None:
        access = await verifier.verify_token(token.value)
        assert access is not None and access.scopes == []
        for wrong in ("", token.value[:-1], token.value + "x", token.value.upper(), "\udcff"):
            assert await verifier.verify_token(wrong) is None

    anyio.run(check)
    with pytest.raises(ValueError, match="^NEXUS_MCP_TOKEN: the token has 3 characters"):
        checked_token("abc", "NEXUS_MCP_TOKEN")
