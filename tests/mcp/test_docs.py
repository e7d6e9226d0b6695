"""docs/mcp.md's examples, run: the run_code script against the real time server, and the
settings table against the config schema."""

from __future__ import annotations

import re
from collections.abc import Callable

from mcp_helpers import REPO, time_server
from nexus_mcp._settings import SERVER_SCHEMA

from nexus_core import Nexus

PAGE = (REPO / "docs" / "mcp.md").read_text(encoding="utf-8")


def test_the_run_code_example_runs(make_nexus: Callable[..., Nexus]) -> None:
    [script] = [block for block in re.findall(r"```python\n(.*?)```", PAGE, re.DOTALL)
                if block.startswith("import tools, parallel")]
    nx = make_nexus({"time": time_server()}, active=["nexus.mcp.client", "nexus.tool.code_exec"])
    result = nx.invoke("run_code", {"script": script})
    assert not result.is_error, result.error
    value = result.output_structured["result"]
    assert len(value["days"]) == 4 and value["noon_utc_in_tokyo"].endswith("T21:00:00+09:00")


def test_the_settings_table_lists_every_key() -> None:
    table = PAGE.split("### Settings of a server")[1].split("\n\n")[1]
    documented = re.findall(r"^\| `(\w+)` \|", table, re.MULTILINE)
    assert documented == list(SERVER_SCHEMA["properties"])

