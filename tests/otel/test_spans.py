"""The spans and metrics of nexus.otel, read back from the OpenTelemetry SDK's in-memory
exporter and reader: names, kinds, parents, attributes and the gate events, for direct calls,
run_code runs (inner calls children of the run, parallel ones siblings), model requests and
agent tasks; and that installed-but-off registers nothing."""

from __future__ import annotations

import json
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nexus_core.llm import Message, ModelCall, ModelError, ModelRequest, ModelResponse, Usage
from nexus_otel import PLUGIN_ID, TRACER_NAME, OtelPlugin
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from nexus_core import Answer, Ask, Nexus, Rewrite, ToolCall, ToolDef, ToolResult, Veto, hookimpl, native_tool

CE = "nexus.tool.code_exec"


class Traces:
    """An SDK tracer and meter provider whose spans and metrics a test reads back."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def plugin(self) -> Any:
        return OtelPlugin.using(self.tracer_provider, self.meter_provider)

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, f"{len(found)} spans named {name!r} in {[s.name for s in self.spans()]}"
        return found[0]

    def points(self, metric: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        out = []
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for m in scope.metrics:
                    if m.name == metric:
                        out.extend(m.data.data_points)
        return out


@pytest.fixture
def traces() -> Traces:
    return Traces()


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def echo() -> ToolDef:
    return native_tool("echo", "Echo the text.", {"type": "object", "properties": {"text": {"type": "string"}}},
                       lambda a: a.get("text", ""))


class Gates:
    """A veto for `delete`, a rewrite of echo's text "rude", an ask for `deploy`."""

    NEXUS_PLUGIN_ID = "acme.gates"

    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Veto | Rewrite | Ask | None:
        if tool.name == "delete":
            return Veto("deleting is off")
        if tool.name == "echo" and call.arguments.get("text") == "rude":
            return Rewrite({"text": "polite"})
        if tool.name == "deploy":
            return Ask("deploy to production?")
        return None


def test_a_direct_call_is_one_execute_tool_span_by_the_conventions(traces: Traces) -> None:
    with Nexus(autoload=False, plugins=[traces.plugin()], tools=[echo()]) as nx:
        assert nx.invoke(ToolCall(id="c1", name="echo", arguments={"text": "hi"})).output == "hi"
        assert nx.invoke(ToolCall(id="c2", name="nope")).error_kind == "unknown_tool"
    ok, unknown = traces.spans()
    assert ok.name == "execute_tool echo" and ok.kind is SpanKind.INTERNAL and ok.parent is None
    assert dict(ok.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "echo", "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.type": "function", "gen_ai.tool.description": "Echo the text."}
    assert ok.status.status_code is StatusCode.UNSET
    assert unknown.name == "execute_tool nope" and unknown.attributes["error.type"] == "unknown_tool"
    assert unknown.status.status_code is StatusCode.ERROR
    # no content unless asked for
    assert "gen_ai.tool.call.arguments" not in ok.attributes and "gen_ai.tool.call.result" not in ok.attributes


def test_arguments_and_results_are_recorded_only_when_configured(traces: Traces,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    config = {"plugins": {PLUGIN_ID: {"capture_content": True}}}
    with Nexus.from_config(config, autoload=False, plugins=[traces.plugin()], tools=[echo()]) as nx:
        nx.invoke("echo", {"text": "secret sauce"})
    span = traces.one("execute_tool echo")
    assert span.attributes["gen_ai.tool.call.arguments"] == '{"text": "secret sauce"}'
    assert span.attributes["gen_ai.tool.call.result"] == "secret sauce"

    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    again = Traces()
    with Nexus(autoload=False, plugins=[again.plugin()], tools=[echo()]) as nx:
        nx.invoke("echo", {"text": "by the variable"})
    assert again.one("execute_tool echo").attributes["gen_ai.tool.call.result"] == "by the variable"


def test_gate_decisions_are_events_naming_the_plugin(traces: Traces) -> None:
    tools = [echo(), native_tool("delete", "Delete.", {"type": "object"}, lambda a: "gone"),
             native_tool("deploy", "Deploy.", {"type": "object"}, lambda a: "deployed")]
    with Nexus(autoload=False, plugins=[traces.plugin(), Gates()], tools=tools) as nx:
        assert nx.invoke("delete").error_kind == "vetoed"
        assert nx.invoke("echo", {"text": "rude"}).output == "polite"
        assert nx.invoke("deploy", approver=lambda question: Answer(False, "not today", by="ops")).is_error
    veto = traces.one("execute_tool delete")
    (event,) = veto.events
    assert event.name == "nexus.gate.veto"
    assert event.attributes["nexus.gate.plugin"] == "acme.gates"
    assert event.attributes["nexus.gate.hook"] == "nexus_before_tool_invoke"
    assert event.attributes["nexus.gate.reason"] == "deleting is off"
    assert veto.attributes["error.type"] == "vetoed"
    (rewrite,) = traces.one("execute_tool echo").events
    assert rewrite.name == "nexus.gate.rewrite" and rewrite.attributes["nexus.gate.plugin"] == "acme.gates"
    ask, answer = traces.one("execute_tool deploy").events
    assert ask.name == "nexus.gate.ask" and ask.attributes["nexus.gate.reason"] == "deploy to production?"
    assert answer.name == "nexus.gate.answer" and answer.attributes["nexus.gate.approved"] is False
    assert answer.attributes["nexus.gate.answered_by"] == "ops"
    assert answer.attributes["nexus.gate.answer"] == "not today"


def test_a_call_made_inside_a_call_is_its_child(traces: Traces) -> None:
    def outer(arguments: dict[str, Any], ctx: Any) -> str:
        return "outer:" + ctx.nexus.invoke("echo", {"text": "inner"}).output

    tools = [echo(), native_tool("outer", "Call echo.", {"type": "object"}, outer, ctx=True)]
    with Nexus(autoload=False, plugins=[traces.plugin()], tools=tools) as nx:
        assert nx.invoke("outer").output == "outer:inner"
    inner, outer_span = traces.spans()
    assert outer_span.name == "execute_tool outer" and inner.name == "execute_tool echo"
    assert parent_of(inner) == outer_span.context.span_id


def test_the_duration_metric_is_by_tool_and_outcome(traces: Traces) -> None:
    with Nexus(autoload=False, plugins=[traces.plugin(), Gates()],
               tools=[echo(), native_tool("delete", "Delete.", {"type": "object"}, lambda a: "gone")]) as nx:
        nx.invoke("echo", {"text": "a"})
        nx.invoke("echo", {"text": "b"})
        nx.invoke("delete")
        nx.invoke("made_up_by_a_model")
    points = {tuple(sorted(p.attributes.items())): p for p in traces.points("gen_ai.execute_tool.duration")}
    op = ("gen_ai.operation.name", "execute_tool")
    assert points[(op, ("gen_ai.tool.name", "echo"))].count == 2
    assert points[(("error.type", "vetoed"), op, ("gen_ai.tool.name", "delete"))].count == 1
    # a name no tool has does not become a metric series of its own
    assert points[(("error.type", "unknown_tool"), op, ("gen_ai.tool.name", "_OTHER"))].count == 1


def test_a_sampler_that_drops_the_span_drops_its_content_and_keeps_the_metric(
        traces: Traces, monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    import nexus_otel._tracer as tracer_module

    encoded: list[Any] = []
    real_json = tracer_module._json
    monkeypatch.setattr(tracer_module, "_json", lambda value: encoded.append(value) or real_json(value))
    dropping = TracerProvider(sampler=ALWAYS_OFF)
    dropping.add_span_processor(SimpleSpanProcessor(traces.exporter))
    config = {"plugins": {PLUGIN_ID: {"capture_content": True}}}
    with Nexus.from_config(config, autoload=False, plugins=[OtelPlugin.using(dropping, traces.meter_provider)],
                           tools=[echo()]) as nx:
        assert nx.invoke("echo", {"text": "not for the trace"}).output == "not for the trace"
        assert nx.invoke("nope").error_kind == "unknown_tool"
    assert traces.spans() == [] and encoded == []  # the arguments were never turned into JSON
    counts = {p.attributes["gen_ai.tool.name"]: p.count for p in traces.points("gen_ai.execute_tool.duration")}
    assert counts == {"echo": 1, "_OTHER": 1}  # metrics are not sampled


def test_a_tool_registered_anew_under_its_name_has_its_new_description(traces: Traces) -> None:
    with Nexus(autoload=False, plugins=[traces.plugin()], tools=[echo()]) as nx:
        nx.invoke("echo", {"text": "a"})
        nx.remove_tool("echo")
        nx.add_tool(native_tool("echo", "Echo it louder.", {"type": "object"}, lambda a: "A"))
        nx.invoke("echo", {"text": "a"})
    first, second = traces.named("execute_tool echo")
    assert first.attributes["gen_ai.tool.description"] == "Echo the text."
    assert second.attributes["gen_ai.tool.description"] == "Echo it louder."


# -- run_code -------------------------------------------------------------------------------


class Probe:
    """A tool that sleeps `ms`, and the gates a run meets: `value == "veto"` is vetoed."""

    @staticmethod
    def tooldef() -> ToolDef:
        def handler(arguments: dict[str, Any]) -> Any:
            time.sleep(arguments.get("ms", 0) / 1000)
            return {"value": arguments.get("value")}

        return ToolDef(name="probe", description="Sleep, then return value.", handler=handler,
                       input_schema={"type": "object", "properties": {"ms": {"type": "integer"}, "value": {}}},
                       output_schema={"type": "object", "properties": {"value": {}}})

    @hookimpl
    def nexus_before_tool_invoke(self, call: ToolCall, tool: ToolDef) -> Veto | None:
        return Veto("no vetoed values") if call.arguments.get("value") == "veto" else None


@pytest.fixture
def run_code_nexus(tmp_path: Path, traces: Traces) -> Iterator[Nexus]:
    config = {"workspace": str(tmp_path), "session_dir": str(tmp_path / "sessions"), "skills": [],
              "plugins": {"active": [CE], CE: {"timeout_seconds": 60, "max_workers": 3}}}
    with Nexus.from_config(config, plugins=[traces.plugin(), Probe()], tools=[Probe.tooldef()]) as nx:
        yield nx


def test_run_code_is_the_parent_of_its_inner_calls_parallel_ones_siblings(run_code_nexus: Nexus,
                                                                          traces: Traces) -> None:
    script = textwrap.dedent("""\
        import tools, parallel

        def run(ctx):
            first = tools.probe(value="first").value
            many = parallel.map([30, 10, 20], lambda ms: tools.probe(ms=ms, value=ms).value)
            return [first, many]
        """)
    result = run_code_nexus.invoke("run_code", {"script": script})
    assert result.output_structured["result"] == ["first", [30, 10, 20]], result.output
    run = traces.one("execute_tool run_code")
    probes = traces.named("execute_tool probe")
    assert len(probes) == 4
    assert {parent_of(p) for p in probes} == {run.context.span_id}
    assert {p.context.trace_id for p in probes} == {run.context.trace_id}
    assert all(p.attributes["gen_ai.tool.call.id"] != run.attributes["gen_ai.tool.call.id"] for p in probes)
    assert run.attributes["nexus.code_exec.tool_calls"] == 4
    assert run.parent is None
    # each inner span lies within its run's
    assert all(run.start_time <= p.start_time and p.end_time <= run.end_time for p in probes)
    (duration,) = traces.points("nexus.code_exec.run.duration")
    (count,) = traces.points("nexus.code_exec.run.tool_calls")
    assert duration.count == 1 and count.sum == 4


def test_an_inner_call_a_gate_refuses_has_its_veto_event(run_code_nexus: Nexus, traces: Traces) -> None:
    script = "import tools\n\ndef run(ctx):\n    return tools.probe(value='veto').value\n"
    result = run_code_nexus.invoke("run_code", {"script": script})
    assert result.is_error
    (inner,) = traces.named("execute_tool probe")
    assert inner.attributes["error.type"] == "vetoed"
    assert parent_of(inner) == traces.one("execute_tool run_code").context.span_id
    assert [e.attributes["nexus.gate.plugin"] for e in inner.events if e.name == "nexus.gate.veto"] == ["Probe"]
    run = traces.one("execute_tool run_code")
    assert run.attributes["error.type"] in ("failure", "exception")  # the script raised the veto's ToolError
    (point,) = traces.points("nexus.code_exec.run.duration")
    assert point.attributes["error.type"] == "runtime_error"


# -- model requests and agent tasks ---------------------------------------------------------


class Parrot:
    """A provider that answers with the last message's text, 3 tokens in, 2 out."""

    name = "parrot"

    @hookimpl
    def nexus_register_providers(self, register: Any) -> None:
        register(self)

    def complete(self, request: ModelRequest, call: ModelCall) -> ModelResponse:
        return ModelResponse(text=request.messages[-1].text, usage=Usage(3, 2), model=request.model + "-2026",
                             id="resp-1", stop_reason="end_turn")


class NoBigModels:
    NEXUS_PLUGIN_ID = "acme.budget"

    @hookimpl
    def nexus_before_model_request(self, request: ModelRequest) -> Veto | None:
        return Veto("too big") if request.model == "big" else None


def test_a_model_request_is_a_chat_span_with_its_usage(traces: Traces) -> None:
    with Nexus(autoload=False, plugins=[traces.plugin(), Parrot(), NoBigModels()]) as nx:
        nx.complete(ModelRequest(provider="parrot", model="small", messages=(Message.user("hello"),),
                                 max_output_tokens=64))
        with pytest.raises(ModelError):
            nx.complete(ModelRequest(provider="parrot", model="big", messages=(Message.user("hello"),)))
    chat = traces.one("chat small")
    assert chat.kind is SpanKind.CLIENT
    assert dict(chat.attributes or {}) == {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "parrot", "gen_ai.request.model": "small",
        "gen_ai.request.max_tokens": 64, "gen_ai.usage.input_tokens": 3, "gen_ai.usage.output_tokens": 2,
        "gen_ai.response.model": "small-2026", "gen_ai.response.id": "resp-1",
        "gen_ai.response.finish_reasons": ("end_turn",)}
    vetoed = traces.one("chat big")
    assert vetoed.attributes["error.type"] == "vetoed" and vetoed.status.status_code is StatusCode.ERROR
    (event,) = vetoed.events
    assert event.name == "nexus.gate.veto" and event.attributes["nexus.gate.plugin"] == "acme.budget"
    assert event.attributes["nexus.gate.hook"] == "nexus_before_model_request"
    tokens = {p.attributes["gen_ai.token.type"]: p.sum for p in traces.points("gen_ai.client.token.usage")}
    assert tokens == {"input": 3, "output": 2}


def conversation() -> ModelRequest:
    """A request of every kind of message: the person's, the model's tool call, its result."""
    return ModelRequest(provider="scripted", model="m1", system="Be brief.", messages=(
        Message.user("what is 2+2?"),
        Message.assistant("Let me check.", (ToolCall(id="t0", name="calc", arguments={"expr": "2+2"}),)),
        Message.tool((ToolResult(id="t0", name="calc", output="4"),
                      ToolResult(id="t9", name="calc", output="", error="no such thing", error_kind="failure"))),
    ))


def test_chat_spans_capture_the_messages_by_the_conventions_when_asked(traces: Traces,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    config = {"plugins": {PLUGIN_ID: {"capture_content": True}}}
    with Nexus.from_config(config, autoload=False, plugins=[traces.plugin(), Scripted()]) as nx:
        nx.complete(conversation())
    chat = traces.one("chat m1")
    assert json.loads(chat.attributes["gen_ai.system_instructions"]) == [{"type": "text", "content": "Be brief."}]
    assert json.loads(chat.attributes["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "what is 2+2?"}]},
        {"role": "assistant", "parts": [{"type": "text", "content": "Let me check."},
                                        {"type": "tool_call", "id": "t0", "name": "calc", "arguments": {"expr": "2+2"}}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "t0", "response": "4"},
                                   {"type": "tool_call_response", "id": "t9", "response": "no such thing"}]},
    ]
    # the scripted model answers a tool message with text: the conventions' "stop", not the provider's word
    assert json.loads(chat.attributes["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "done"}], "finish_reason": "stop"}]
    assert "nexus.gen_ai.input.messages_omitted" not in chat.attributes

    # the variable asks for it too; a model's tool calls are the output's parts
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    again = Traces()
    with Nexus(autoload=False, plugins=[again.plugin(), Scripted()]) as nx:
        nx.complete(ModelRequest(provider="scripted", model="m1", messages=(Message.user("go"),)))
    output = json.loads(again.one("chat m1").attributes["gen_ai.output.messages"])
    assert output == [{"role": "assistant", "finish_reason": "tool_call", "parts": [
        {"type": "tool_call", "id": "t1", "name": "echo", "arguments": {"text": "a"}},
        {"type": "tool_call", "id": "t2", "name": "echo", "arguments": {"text": "b"}}]}]
    assert "gen_ai.system_instructions" not in again.one("chat m1").attributes  # the request had none


def test_chat_messages_are_not_captured_by_default_nor_when_refused(traces: Traces,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    with Nexus(autoload=False, plugins=[traces.plugin(), Scripted()]) as nx:
        nx.complete(conversation())
    assert not any(key.startswith(("gen_ai.input", "gen_ai.output", "gen_ai.system"))
                   for key in traces.one("chat m1").attributes)
    config = {"plugins": {PLUGIN_ID: {"capture_content": True}}}
    vetoed = Traces()
    with Nexus.from_config(config, autoload=False, plugins=[vetoed.plugin(), Parrot(), NoBigModels()]) as nx:
        with pytest.raises(ModelError):
            nx.complete(ModelRequest(provider="parrot", model="big", messages=(Message.user("hello"),)))
    refused = vetoed.one("chat big")  # what was asked is on the span; there is no answer
    assert json.loads(refused.attributes["gen_ai.input.messages"])[0]["parts"][0]["content"] == "hello"
    assert "gen_ai.output.messages" not in refused.attributes


def test_captured_messages_are_bounded_and_say_so(traces: Traces) -> None:
    from nexus_otel._messages import MAX_MESSAGES_CHARS, MAX_PART_CHARS

    long = "x" * (MAX_PART_CHARS + 500)
    many = tuple(Message.user(f"{i}:" + "y" * 4000) for i in range(40))  # ~160 KB of messages
    results = tuple(ToolResult(id=f"r{i}", name="calc", output="z" * 6000) for i in range(40))
    config = {"plugins": {PLUGIN_ID: {"capture_content": True}}}
    with Nexus.from_config(config, autoload=False, plugins=[traces.plugin(), Parrot()]) as nx:
        nx.complete(ModelRequest(provider="parrot", model="long", system=long, messages=(Message.user(long),)))
        nx.complete(ModelRequest(provider="parrot", model="many", messages=many))
        nx.complete(ModelRequest(provider="parrot", model="wide", messages=(Message.tool(results),
                                                                            Message.user("and?"))))
        nx.complete(ModelRequest(provider="parrot", model="widest", messages=(Message.user("go"),
                                                                              Message.tool(results))))
    one = traces.one("chat long").attributes
    [part] = json.loads(one["gen_ai.input.messages"])[0]["parts"]
    assert part["content"] == "x" * MAX_PART_CHARS + f"... (truncated: {MAX_PART_CHARS + 500} characters)"
    assert json.loads(one["gen_ai.system_instructions"])[0]["content"].endswith("(truncated: 8692 characters)")
    assert json.loads(one["gen_ai.output.messages"])[0]["parts"][0]["content"].endswith("characters)")

    kept = traces.one("chat many").attributes
    messages = json.loads(kept["gen_ai.input.messages"])
    assert len(kept["gen_ai.input.messages"]) <= MAX_MESSAGES_CHARS
    # the latest messages are kept, and the span says how many of the oldest were left out
    assert messages[-1]["parts"][0]["content"].startswith("39:")
    assert kept["nexus.gen_ai.input.messages_omitted"] == 40 - len(messages) > 0
    assert messages[0]["parts"][0]["content"].startswith(f"{40 - len(messages)}:")

    wide = traces.one("chat wide").attributes
    assert len(wide["gen_ai.input.messages"]) <= MAX_MESSAGES_CHARS
    [last] = json.loads(wide["gen_ai.input.messages"])  # the tool message was too long to keep beside it
    assert last["role"] == "user" and wide["nexus.gen_ai.input.messages_omitted"] == 1
    # the latest message alone is too long: its first parts, and how many more there were
    widest = traces.one("chat widest").attributes
    assert len(widest["gen_ai.input.messages"]) <= MAX_MESSAGES_CHARS
    [tool] = json.loads(widest["gen_ai.input.messages"])
    *responses, note = tool["parts"]
    assert [r["id"] for r in responses] == [f"r{i}" for i in range(len(responses))] and responses
    assert note == {"type": "text", "content": f"... (truncated: {40 - len(responses)} more parts)"}


class Scripted:
    """A provider that asks for the echo tool twice in parallel on the first turn, then answers."""

    name = "scripted"

    @hookimpl
    def nexus_register_providers(self, register: Any) -> None:
        register(self)

    def complete(self, request: ModelRequest, call: ModelCall) -> ModelResponse:
        if request.messages[-1].role == "user":
            return ModelResponse(tool_calls=(ToolCall(id="t1", name="echo", arguments={"text": "a"}),
                                             ToolCall(id="t2", name="echo", arguments={"text": "b"})),
                                 usage=Usage(10, 5), model=request.model, stop_reason="tool_use")
        return ModelResponse(text="done", usage=Usage(20, 1), model=request.model, stop_reason="end_turn")


def test_an_agent_task_is_the_parent_of_its_turns_and_tool_calls(tmp_path: Path, traces: Traces) -> None:
    config = {"workspace": str(tmp_path), "session_dir": str(tmp_path / "sessions"), "skills": [],
              "model": "scripted:m1", "plugins": {"active": ["nexus.agent"],
                                                   "nexus.agent": {"stream": False, "transcripts": False}}}
    with Nexus.from_config(config, plugins=[traces.plugin(), Scripted()], tools=[echo()]) as nx:
        result = nx.plugin("nexus.agent").run("say a and b")
    assert result.text == "done"
    task = traces.one("invoke_agent nexus")
    assert task.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert task.attributes["gen_ai.conversation.id"] == result.session_id
    assert task.attributes["gen_ai.usage.input_tokens"] == 30 and task.attributes["nexus.agent.turns"] == 2
    chats = traces.named("chat m1")
    calls = traces.named("execute_tool echo")
    assert len(chats) == 2 and len(calls) == 2
    assert {parent_of(s) for s in chats + calls} == {task.context.span_id}
    assert {c.attributes["gen_ai.tool.call.id"] for c in calls} == {"t1", "t2"}


# -- on and off -----------------------------------------------------------------------------


def test_installed_but_off_registers_nothing_on_the_call_path(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER"):
        monkeypatch.delenv(variable, raising=False)
    with Nexus(autoload=False, plugins=[OtelPlugin], tools=[echo()]) as nx:
        assert nx.plugin(PLUGIN_ID) is not None and nx.plugin(PLUGIN_ID).tracer is None
        assert nx.plugin(TRACER_NAME) is None
        implemented = nx.plugin_manager.implemented  # type: ignore[attr-defined]
        assert not {"nexus_tool_call_start", "nexus_tool_result", "nexus_gate_decision"} & implemented


def test_enabled_false_wins_over_given_providers(traces: Traces) -> None:
    config = {"plugins": {PLUGIN_ID: {"enabled": False}}}
    with Nexus.from_config(config, autoload=False, plugins=[traces.plugin()], tools=[echo()]) as nx:
        nx.invoke("echo", {"text": "x"})
    assert traces.spans() == []


def test_a_bad_setting_is_a_config_error_naming_the_key(traces: Traces) -> None:
    from nexus_core import ConfigError

    with pytest.raises(ConfigError, match=r"plugins\.nexus\.otel\.capture_contnet"):
        Nexus.from_config({"plugins": {PLUGIN_ID: {"capture_contnet": True}}}, autoload=False,
                          plugins=[traces.plugin()])


def test_the_tracer_goes_when_the_nexus_closes(traces: Traces) -> None:
    nx = Nexus(autoload=False, plugins=[traces.plugin()], tools=[echo()])
    assert nx.plugin(TRACER_NAME) is not None
    nx.close()
    assert nx.plugin(TRACER_NAME) is None


def test_calls_from_many_threads_each_get_their_span(traces: Traces) -> None:
    with Nexus(autoload=False, plugins=[traces.plugin()], tools=[echo()]) as nx:
        threads = [threading.Thread(target=nx.invoke, args=("echo", {"text": str(i)})) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    spans = traces.named("execute_tool echo")
    assert len(spans) == 8 and all(s.parent is None for s in spans)
    assert len({s.context.trace_id for s in spans}) == 8
