"""calls.jsonl's lines are written piece by piece on every inner call (host/streaming.py): the text
must be what the JSON encoder makes of the whole line, whatever the result holds."""

from __future__ import annotations

import enum
import json
import math

import pytest

from nexus_core import ToolCall, ToolResult
from nexus_tool_code_exec.host.streaming import Ledger, _record_line_by_encoder, record_line


class Colour(enum.Enum):
    RED = "red"


RESULTS = [
    ToolResult(id="c1", name="t", output="ok"),
    ToolResult(id="c1", name="t", output="5", output_structured=5),
    ToolResult(id="c1", name="t", output="2.5", output_structured=2.5),
    ToolResult(id="c1", name="t", output="x", output_structured=-0.0),
    ToolResult(id="c1", name="t", output="big", output_structured=10**30),
    ToolResult(id="c1", name="t", output="nan", output_structured=math.nan),
    ToolResult(id="c1", name="t", output="inf", output_structured=-math.inf),
    ToolResult(id="c1", name="t", output="true", output_structured=True),
    ToolResult(id="c1", name="t", output="[]", output_structured=[1, "a", None, {"k": [2.0]}]),
    ToolResult(id="c1", name="t", output="{}", output_structured={"a": {"b": "ü\u2028\"\\"}}),
    ToolResult(id="c1", name="t", output="enum", output_structured=Colour.RED),  # default=str
    ToolResult(id="c1", name="t", output="é\n\x00\ud800 ☃", error="it failed: ☃", error_kind="failure",
               output_file="/w/out.txt", metadata={"script_line": 3, "nested": {"x": [1, 2]}}),
    ToolResult(id="", name="", output="", metadata={"possibly_done": True, "idempotency_key": "k:1"}),
]


@pytest.mark.parametrize("result", RESULTS, ids=range(len(RESULTS)))
@pytest.mark.parametrize("parallel", [False, 3, True])
def test_a_line_is_what_the_encoder_makes(result: ToolResult, parallel: int | bool) -> None:
    call = ToolCall(id="call-1", name="tool\u00e9", arguments={"x": 1, "s": "ü"}, parent_call_id="p")
    facts = {"arguments_bytes": 12, "arguments_sha256": "ab" * 32, "output_chars": len(result.output),
             "started_at": 1764659000.123456, "duration_seconds": 1.2e-05, "parallel": parallel}
    arguments = json.dumps(call.arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    expected = _record_line_by_encoder(call.id, call.name, arguments, result, facts)
    assert record_line(call.id, call.name, arguments, result, facts) == expected

    for from_journal in (False, True):
        line = Ledger().record(call, result, 30, 1764659000.1234567, 0.0000123, parallel, from_journal=from_journal)
        assert line is not None
        data = json.loads(line)
        facts_now = {k: data[k] for k in ("arguments_bytes", "arguments_sha256", "output_chars", "started_at",
                                          "duration_seconds", "parallel")}
        if from_journal:
            facts_now["from_journal"] = True
        assert line == _record_line_by_encoder(call.id, call.name, arguments, result, facts_now)


def test_a_cut_line_says_so() -> None:
    call = ToolCall(id="call-1", name="t", arguments={"s": "x" * 300})
    ledger = Ledger()
    ledger._recorded = 16 * 1024 * 1024  # the budget spent
    assert ledger.record(call, ToolResult(id="", name="", output="y" * 300), 310) is None
    data = json.loads(ledger.lines()[-1])
    assert data["cut"] is True and data["output_chars"] == 300 and data["result"]["output"].endswith("(300 characters)")
