"""The official MCP conformance suite (@modelcontextprotocol/conformance 0.1.16) against `nexus
mcp serve --http`, as a user runs it: the `nexus` command, a config, installed plugins. The
suite's fixture tools come from a plugin (conformance_fixtures.py), its prompt from a skill.

The suite sends no header of its own, and the server needs its bearer token: the suite talks to
a loopback proxy that adds it (token_proxy.py), passing every other header as sent, so the
DNS-rebinding scenario's forged `Host` and `Origin` reach the server's own check.

Each scenario the server's declared capabilities cover must pass; the ones it does not (and
why) are `NOT_SUPPORTED`, as docs/mcp.md lists them; with `--stateless`, also `NOT_STATELESS`. A scenario the suite adds that is in
neither list fails the test, so it is looked at. The suite has no stdio mode for servers
(`conformance server --url` only): stdio is covered by test_serve.py's SDK and Inspector runs.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from conformance_helpers import failures, run_suite, scenario_checks
from mcp_helpers import FakePlugins, HttpServe
from token_proxy import TokenProxy

pytestmark = [pytest.mark.conformance, pytest.mark.slow]

#: the scenarios that pass, by the capabilities `nexus mcp serve` declares (tools, prompts,
#: resources, logging) and what its tools do
SUPPORTED = {
    "server-initialize", "ping", "logging-set-level",
    "tools-list", "tools-call-simple-text", "tools-call-image", "tools-call-audio", "tools-call-embedded-resource",
    "tools-call-mixed-content", "tools-call-with-logging", "tools-call-error", "tools-call-with-progress",
    "tools-call-elicitation", "json-schema-2020-12",
    "server-sse-multiple-streams", "server-sse-polling",
    "resources-list", "prompts-list", "prompts-get-simple",
    "dns-rebinding-protection",
}

#: the scenarios it does not pass, and why (docs/mcp.md, "Conformance")
NOT_SUPPORTED = {
    "completion-complete": "no completion capability: a Nexus has no arguments to complete",
    "tools-call-sampling": "no sampling: a Nexus asks the client's user (elicitation), not the client's model",
    "elicitation-sep1034-defaults": "the server elicits only approvals and questions, whose forms it makes itself",
    "elicitation-sep1330-enums": "the server elicits only approvals and questions, whose forms it makes itself",
    "resources-read-text": "needs the fixture resource test://static-text: a Nexus's resources are its skills' "
                           "files and its runs' records",
    "resources-read-binary": "needs the fixture resource test://static-binary (see resources-read-text)",
    "resources-templates-read": "no resource templates",
    "resources-subscribe": "no resource subscriptions",
    "resources-unsubscribe": "no resource subscriptions",
    "prompts-get-with-args": "prompts are skills, which take no arguments",
    "prompts-get-embedded-resource": "prompts are skills, whose instructions are text",
    "prompts-get-with-image": "prompts are skills, whose instructions are text",
}

#: what a `--stateless` server cannot do besides: it keeps no session, so neither the level a
#: client set with logging/setLevel nor the capabilities it declared at initialize outlive their
#: request
NOT_STATELESS = {
    "tools-call-with-logging": "the level set by logging/setLevel is not kept: each request stands alone",
    "tools-call-elicitation": "the client's capabilities (elicitation) are not kept: each request stands alone",
}

SKILL = """---
name: test_simple_prompt
description: A simple prompt for the conformance suite.
---
This is a simple prompt for testing.
"""


@pytest.fixture
def served(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    fakes = FakePlugins(tmp_path / "site")
    fakes.add("test.conformance", "nexus_conformance_fixtures",
              (Path(__file__).parent / "conformance_fixtures.py").read_text(encoding="utf-8"))
    skill = tmp_path / "skills" / "test_simple_prompt"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(SKILL)
    (skill / "notes.txt").write_text("a file of the skill, listed as a resource\n")
    config = tmp_path / "nexus.yaml"
    config.write_text(yaml.safe_dump({
        "workspace": str(tmp_path), "session_dir": str(tmp_path / "session"), "skills": [str(tmp_path / "skills")],
        "plugins": {"active": ["test.conformance", "nexus.skills"]},
    }))
    return config, fakes.env()


@pytest.mark.parametrize("stateless", [False, True], ids=["sessions", "stateless"])
def test_the_conformance_suite_over_http(stateless: bool, served: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    if shutil.which("npx") is None:
        pytest.skip("npx is not installed (Node.js brings it; any version: npx fetches node@22 for the suite)")
    config, env = served
    server = HttpServe(config, env, *(["--stateless"] if stateless else []))
    supported = SUPPORTED - set(NOT_STATELESS) if stateless else SUPPORTED
    not_supported = {**NOT_SUPPORTED, **NOT_STATELESS} if stateless else NOT_SUPPORTED
    try:
        with TokenProxy(server.port, server.token) as proxy:
            proc = run_suite("server", "--url", proxy.url, "--suite", "all", output=tmp_path / "results", cwd=tmp_path)
    finally:
        server.stop()
    results = scenario_checks(tmp_path / "results")
    assert results, f"the suite wrote no results:\n{proc.stdout}\n{proc.stderr}"
    unknown = set(results) - supported - set(not_supported)
    assert not unknown, f"scenarios this test does not know (new in the suite?): {sorted(unknown)}"
    failed = {name: failures(checks) for name, checks in results.items() if name in supported and failures(checks)}
    assert not failed, f"supported scenarios failed: {failed}"
    assert supported <= set(results), f"scenarios not run: {sorted(supported - set(results))}"
    # and the unsupported ones do fail: when one starts passing, it moves to SUPPORTED (and the docs)
    passing = sorted(name for name in not_supported if name in results and not failures(results[name]))
    assert not passing, f"now passing, so supported: {passing}"
