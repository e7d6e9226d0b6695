"""The hooks that turn a Nexus's calls into spans and metrics, by the OpenTelemetry GenAI
semantic conventions. Registered only while tracing is on (see `_setup`).

| what                         | span                       | kind     | opened / closed by                               |
|------------------------------|----------------------------|----------|--------------------------------------------------|
| a tool call (any origin)     | `execute_tool {tool}`      | INTERNAL | `nexus_tool_call_start` / `nexus_tool_result`     |
| a model request              | `chat {model}`             | CLIENT   | `nexus_model_request_start` / `_response`, `_error` |
| an agent task                | `invoke_agent nexus`       | INTERNAL | `nexus_agent_task_start` / `nexus_agent_task_end` |
| a gate's decision            | event `nexus.gate.{action}` on the span of its call or request | | `nexus_gate_decision` |

A call's span is made current on its thread while it runs, so what the call does there (a
nested `Nexus.invoke`, an MCP request, whose SDK sends the span's `traceparent`) is its child.
An inner call of run_code is answered on a host thread that did not open run_code's span: its
parent is found by `parent_call_id`, so a script's calls are children of its run, parallel
ones siblings.
"""

from __future__ import annotations

import json
import threading
import time
from typing import TYPE_CHECKING, Any

from nexus_core import hookimpl
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from opentelemetry.semconv.attributes import error_attributes
from opentelemetry.trace import SpanKind, Status, StatusCode

if TYPE_CHECKING:
    from nexus_core import ToolCall, ToolDef, ToolResult
    from nexus_core.llm import ModelError, ModelRequest, ModelResponse
    from nexus_core.plugins import GateDecision
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span, TracerProvider

ERROR_TYPE = error_attributes.ERROR_TYPE
#: the histogram of tool-call durations the issue names; the conventions have no constant for it yet
EXECUTE_TOOL_DURATION = "gen_ai.execute_tool.duration"
CODE_EXEC_DURATION = "nexus.code_exec.run.duration"
CODE_EXEC_TOOL_CALLS = "nexus.code_exec.run.tool_calls"
#: the conventions' value for a name outside a known set (an unknown tool a model made up):
#: keeps a metric's cardinality bounded
OTHER = "_OTHER"
AGENT_NAME = "nexus"
#: how much of an argument or a result text a span keeps when content is recorded
MAX_CONTENT_CHARS = 8192

#: how a run_code error message starts -> its error.type
_RUN_ERRORS = (("script rejected", "rejected"), ("script timed out", "timeout"),
               ("memory limit", "memory_limit"), ("result is not JSON", "unserializable_result"),
               ("runtime error", "runtime_error"))


def _clip(text: str) -> str:
    return text if len(text) <= MAX_CONTENT_CHARS else text[:MAX_CONTENT_CHARS] + f"... ({len(text)} characters)"


def _json(value: Any) -> str:
    try:
        return _clip(json.dumps(value, ensure_ascii=False, default=str))
    except (TypeError, ValueError):
        return _clip(repr(value))


def run_error_type(error: str) -> str:
    for prefix, kind in _RUN_ERRORS:
        if error.startswith(prefix):
            return kind
    return "error"


_now = time.perf_counter
_thread = threading.get_ident


class _ToolSpans:
    """What every call of one tool shares, made once (not per call): its span's name and fixed
    attributes, and the attributes of its duration metric when it succeeds. Kept per tool name,
    and made again when the name comes to mean another `ToolDef` (a tool registered anew)."""

    __slots__ = ("tool", "span_name", "attributes", "metric")

    def __init__(self, tool: ToolDef | None, name: str) -> None:
        self.tool = tool
        self.span_name = f"execute_tool {name}"
        self.attributes: dict[str, Any] = {
            gen_ai.GEN_AI_OPERATION_NAME: "execute_tool",
            gen_ai.GEN_AI_TOOL_NAME: name,
            gen_ai.GEN_AI_TOOL_TYPE: "function",
        }
        if tool is not None and tool.description:
            self.attributes[gen_ai.GEN_AI_TOOL_DESCRIPTION] = _clip(tool.description)
        # an unknown tool's name (a model's invention) is no metric attribute: the series stay bounded
        self.metric: dict[str, Any] = {gen_ai.GEN_AI_OPERATION_NAME: "execute_tool",
                                       gen_ai.GEN_AI_TOOL_NAME: name if tool is not None else OTHER}

    def failed_metric(self, kind: str) -> dict[str, Any]:
        return {**self.metric, ERROR_TYPE: kind}


class _Open:
    """A tool call's span while it runs: the span, the context token to detach on its thread,
    when it started (for the duration metric), and what its tool's calls share."""

    __slots__ = ("span", "token", "started", "shared")

    def __init__(self, span: Span, token: object, started: float, shared: _ToolSpans) -> None:
        self.span, self.token, self.started, self.shared = span, token, started, shared


class Tracer:
    """Spans and metrics of one Nexus's calls, model requests and agent tasks.

    The tool-call hooks run on every call, so they do as little as they can per call (bench/
    bench_tracing.py measures them): a tool's span name and fixed attributes are made once
    (`_ToolSpans`); a call adds its id (and script line); what costs more (arguments and results
    as JSON, an error's status) is built only when the span records, so a sampler that drops a
    span saves that work too."""

    def __init__(self, tracer_provider: TracerProvider, meter_provider: MeterProvider, capture_content: bool) -> None:
        from . import __version__

        self.capture_content = capture_content
        self.tracer = tracer_provider.get_tracer("nexus_otel", __version__)
        meter = meter_provider.get_meter("nexus_otel", __version__)
        self.tool_duration = meter.create_histogram(
            EXECUTE_TOOL_DURATION, unit="s", description="Duration of a tool call, gates included")
        self.run_duration = meter.create_histogram(
            CODE_EXEC_DURATION, unit="s", description="Duration of a run_code script's run")
        self.run_tool_calls = meter.create_histogram(
            CODE_EXEC_TOOL_CALLS, unit="{call}", description="Inner tool calls of a run_code run")
        self.operation_duration = meter.create_histogram(
            gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION, unit="s", description="GenAI operation duration")
        self.token_usage = meter.create_histogram(
            gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE, unit="{token}", description="Number of input and output tokens used")
        #: tool name -> what its calls share (`_ToolSpans`); one entry per registered tool
        self._tools: dict[str, _ToolSpans] = {}
        #: (call id, thread) -> the open call: a call closes on the thread that opened it
        self._calls: dict[tuple[str, int], _Open] = {}
        #: call id -> its span, for inner calls (by parent_call_id) and gate decisions
        self._spans: dict[str, Span] = {}
        #: model request id -> (its span, when it started)
        self._requests: dict[str, tuple[Span, float]] = {}
        #: agent session id -> (its task's span, the context token)
        self._tasks: dict[str, tuple[Span, object]] = {}

    # -- tool calls ---------------------------------------------------------------------------

    def _shared(self, call: ToolCall, tool: ToolDef | None) -> _ToolSpans:
        if tool is None:  # not kept: a model can make up any number of names
            return _ToolSpans(None, call.name)
        shared = self._tools.get(tool.name)
        if shared is None or shared.tool is not tool:
            shared = self._tools[tool.name] = _ToolSpans(tool, tool.name)
        return shared

    @hookimpl
    def nexus_tool_call_start(self, call: ToolCall, tool: ToolDef | None) -> None:
        shared = self._shared(call, tool)
        attributes = shared.attributes.copy()
        attributes[gen_ai.GEN_AI_TOOL_CALL_ID] = call.id
        if call.metadata:
            line = call.metadata.get("script_line")
            if isinstance(line, int) and not isinstance(line, bool):
                attributes["nexus.code_exec.script_line"] = line
        parent_id = call.parent_call_id
        parent_span = self._spans.get(parent_id) if parent_id is not None else None
        parent = trace.set_span_in_context(parent_span) if parent_span is not None else None
        span = self.tracer.start_span(shared.span_name, context=parent, kind=SpanKind.INTERNAL,
                                      attributes=attributes)
        if self.capture_content and span.is_recording():
            span.set_attribute(gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS, _json(call.arguments))
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        self._spans[call.id] = span
        self._calls[(call.id, _thread())] = _Open(span, token, _now(), shared)

    @hookimpl
    def nexus_tool_result(self, call: ToolCall, result: ToolResult) -> None:
        opened = self._calls.pop((call.id, _thread()), None)
        if opened is None:
            return
        span = opened.span
        if self._spans.get(call.id) is span:
            del self._spans[call.id]
        if result.error is None:
            metric = opened.shared.metric
        else:
            kind = result.error_kind or "error"
            metric = opened.shared.failed_metric(kind)
            if span.is_recording():
                span.set_attribute(ERROR_TYPE, kind)
                span.set_status(Status(StatusCode.ERROR, _clip(result.error) if self.capture_content else kind))
        if self.capture_content and span.is_recording():
            span.set_attribute(gen_ai.GEN_AI_TOOL_CALL_RESULT, _clip(result.output if result.error is None
                                                                     else (result.error or result.output)))
        try:
            otel_context.detach(opened.token)  # type: ignore[arg-type]
        finally:
            span.end()
            self.tool_duration.record(_now() - opened.started, metric)

    # -- gates --------------------------------------------------------------------------------

    @hookimpl
    def nexus_gate_decision(self, decision: GateDecision) -> None:
        from nexus_core.llm import ModelRequest

        subject = decision.subject
        span: Span | None
        if isinstance(subject, ModelRequest):
            found = self._requests.get(subject.id)
            span = found[0] if found is not None else None
        else:
            span = self._spans.get(getattr(subject, "id", None) or "")
        if span is None:
            span = trace.get_current_span()
        attributes: dict[str, Any] = {"nexus.gate.hook": decision.hook, "nexus.gate.action": decision.action,
                                      "nexus.gate.plugin": decision.plugin or "", "nexus.gate.round": decision.round}
        if decision.reason:
            attributes["nexus.gate.reason"] = _clip(decision.reason)
        if decision.answer is not None:
            attributes["nexus.gate.approved"] = decision.answer.approved
            attributes["nexus.gate.answered_by"] = decision.answer.by
            if decision.answer.text:
                attributes["nexus.gate.answer"] = _clip(decision.answer.text)
        if decision.action == "rewrite" and self.capture_content:
            attributes[gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS] = _json(getattr(subject, "arguments", None))
        span.add_event(f"nexus.gate.{decision.action}", attributes)

    # -- model requests -----------------------------------------------------------------------

    @hookimpl
    def nexus_model_request_start(self, request: ModelRequest) -> None:
        attributes: dict[str, Any] = {
            gen_ai.GEN_AI_OPERATION_NAME: "chat",
            gen_ai.GEN_AI_PROVIDER_NAME: request.provider,
            gen_ai.GEN_AI_REQUEST_MODEL: request.model,
        }
        if request.max_output_tokens is not None:
            attributes[gen_ai.GEN_AI_REQUEST_MAX_TOKENS] = request.max_output_tokens
        span = self.tracer.start_span(f"chat {request.model}", kind=SpanKind.CLIENT, attributes=attributes)
        self._requests[request.id] = (span, time.perf_counter())

    def _request_metric(self, request: ModelRequest) -> dict[str, Any]:
        return {gen_ai.GEN_AI_OPERATION_NAME: "chat", gen_ai.GEN_AI_PROVIDER_NAME: request.provider,
                gen_ai.GEN_AI_REQUEST_MODEL: request.model}

    def _messages(self, span: Span, request: ModelRequest, response: ModelResponse | None = None) -> None:
        """The request's messages (as sent: after its gates) and the response's, by the
        conventions, when content is captured and the span records."""
        if not (self.capture_content and span.is_recording()):
            return
        from . import _messages

        system = _messages.system_instructions(request)
        if system is not None:
            span.set_attribute(gen_ai.GEN_AI_SYSTEM_INSTRUCTIONS, system)
        messages, omitted = _messages.input_messages(request)
        span.set_attribute(gen_ai.GEN_AI_INPUT_MESSAGES, messages)
        if omitted:
            span.set_attribute(_messages.INPUT_OMITTED, omitted)
        if response is not None:
            span.set_attribute(gen_ai.GEN_AI_OUTPUT_MESSAGES, _messages.output_messages(response))

    @hookimpl
    def nexus_model_response(self, request: ModelRequest, response: ModelResponse) -> None:
        found = self._requests.pop(request.id, None)
        if found is None:
            return
        span, started = found
        self._messages(span, request, response)
        usage = response.usage
        span.set_attributes({gen_ai.GEN_AI_USAGE_INPUT_TOKENS: usage.input_tokens,
                             gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: usage.output_tokens})
        if response.model:
            span.set_attribute(gen_ai.GEN_AI_RESPONSE_MODEL, response.model)
        if response.id:
            span.set_attribute(gen_ai.GEN_AI_RESPONSE_ID, response.id)
        if response.stop_reason:
            span.set_attribute(gen_ai.GEN_AI_RESPONSE_FINISH_REASONS, [response.stop_reason])
        span.end()
        metric = self._request_metric(request)
        if response.model:
            metric[gen_ai.GEN_AI_RESPONSE_MODEL] = response.model
        self.operation_duration.record(time.perf_counter() - started, metric)
        self.token_usage.record(usage.input_tokens, {**metric, gen_ai.GEN_AI_TOKEN_TYPE: "input"})
        self.token_usage.record(usage.output_tokens, {**metric, gen_ai.GEN_AI_TOKEN_TYPE: "output"})

    @hookimpl
    def nexus_model_request_error(self, request: ModelRequest, error: ModelError) -> None:
        found = self._requests.pop(request.id, None)
        if found is None:
            return
        span, started = found
        self._messages(span, request)
        kind = error.kind or "error"
        span.set_attribute(ERROR_TYPE, kind)
        span.set_status(Status(StatusCode.ERROR, _clip(str(error))))
        span.end()
        self.operation_duration.record(time.perf_counter() - started, {**self._request_metric(request), ERROR_TYPE: kind})

    # -- agent tasks (nexus-rt-agent's hooks: optional, the agent may not be installed) ---------

    @hookimpl(optionalhook=True)
    def nexus_agent_task_start(self, session: Any, text: str) -> None:
        attributes = {gen_ai.GEN_AI_OPERATION_NAME: "invoke_agent", gen_ai.GEN_AI_AGENT_NAME: AGENT_NAME,
                      gen_ai.GEN_AI_CONVERSATION_ID: session.id, gen_ai.GEN_AI_PROVIDER_NAME: session.provider,
                      gen_ai.GEN_AI_REQUEST_MODEL: session.model_name}
        span = self.tracer.start_span(f"invoke_agent {AGENT_NAME}", kind=SpanKind.INTERNAL, attributes=attributes)
        self._tasks[session.id] = (span, otel_context.attach(trace.set_span_in_context(span)))

    @hookimpl(optionalhook=True)
    def nexus_agent_task_end(self, session: Any, result: Any) -> None:
        found = self._tasks.pop(session.id, None)
        if found is None:
            return
        span, token = found
        if result is not None:
            span.set_attributes({gen_ai.GEN_AI_USAGE_INPUT_TOKENS: result.usage.input_tokens,
                                 gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: result.usage.output_tokens,
                                 "nexus.agent.turns": result.turns, "nexus.agent.stop_reason": str(result.stop_reason)})
            if result.stop_reason in ("error", "vetoed"):
                span.set_attribute(ERROR_TYPE, str(result.stop_reason))
                span.set_status(Status(StatusCode.ERROR, _clip(result.error or "")))
        else:
            span.set_attribute(ERROR_TYPE, "exception")
            span.set_status(Status(StatusCode.ERROR))
        try:
            otel_context.detach(token)  # type: ignore[arg-type]
        finally:
            span.end()

    # -- run_code (nexus-rt-tool-code-exec's hook: optional) -----------------------------------

    @hookimpl(optionalhook=True)
    def nexus_code_exec_result(self, result: Any) -> None:
        attributes: dict[str, Any] = {}
        if result.error:
            attributes[ERROR_TYPE] = run_error_type(result.error)
        span = self._spans.get(result.call_id)
        if span is not None:
            span.set_attributes({"nexus.code_exec.tool_calls": result.tool_calls,
                                 "nexus.code_exec.duration": result.duration_seconds,
                                 "nexus.code_exec.stdout_truncated": bool(result.stdout_truncated),
                                 **attributes})
        self.run_duration.record(result.duration_seconds, attributes)
        self.run_tool_calls.record(result.tool_calls, attributes)
