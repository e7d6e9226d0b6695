"""What does tracing cost a call? `Nexus.invoke` of a no-op tool (one no-op gate, schema on) with
the nexus.otel plugin not installed, installed but off (no OTEL_* exporter: it registers no
hook), two no-op observers of the hooks a tracer implements (the core's cost of calling them),
and on: spans made by the OpenTelemetry SDK and dropped (no span processor: the cost of
the hooks, the span and its attributes), and spans handed to a batch span processor whose
exporter discards them (what a configured exporter costs on the call path; the export itself
runs on the processor's thread). Metrics are recorded in every "on" row.

    .venv/bin/python bench/bench_tracing.py [--batches 300] [--batch-size 100] [--clock wall]

Timed as bench_invoke.py times (the p50 of per-call means over batches, after a warm-up),
interleaved: each round measures every row once, and a row's figure is its median over rounds,
so a busy machine's slow moments fall on all rows alike. By this process's CPU time unless
`--clock wall`: on a shared machine the wall clock also counts the time other processes had the
core, which swamps differences of a few µs. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence

from bench_invoke import ARGUMENTS, SCHEMA, NoopGate, measure, noop
from nexus_otel import OtelPlugin
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind

from nexus_core import Nexus, ToolCall, ToolResult, hookimpl, native_tool


class Discard(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class NoopObservers:
    """The two observer hooks a tracer implements, doing nothing: the core's cost of calling them."""

    @hookimpl
    def nexus_tool_call_start(self, call: object, tool: object) -> None:
        pass

    @hookimpl
    def nexus_tool_result(self, call: object, result: object) -> None:
        pass


def nexus(plugins: list[object]) -> Nexus:
    nx = Nexus(autoload=False, plugins=[NoopGate(), *plugins])
    nx.add_tool(native_tool("noop", "does nothing", SCHEMA, noop))
    assert not nx.invoke("noop", ARGUMENTS).is_error
    return nx


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    opts = parser.parse_args()
    clock = time.process_time_ns if opts.clock == "cpu" else time.perf_counter_ns
    for variable in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER"):
        os.environ.pop(variable, None)

    dropped = TracerProvider()  # no span processor: spans are made, then dropped
    batched = TracerProvider()
    batched.add_span_processor(BatchSpanProcessor(Discard(), max_queue_size=1 << 20))
    meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
    rows: list[tuple[str, Nexus]] = [
        ("nexus.otel not installed", nexus([])),
        ("installed, off (no exporter set)", nexus([OtelPlugin])),
        ("two no-op observers (start, result)", nexus([NoopObservers()])),
        ("on: SDK spans, no processor", nexus([OtelPlugin.using(dropped, meters)])),
        ("on: batch processor, exporter", nexus([OtelPlugin.using(batched, meters)])),
    ]
    assert rows[1][1].plugin("nexus.otel").tracer is None and rows[3][1].plugin("nexus.otel").tracer is not None
    tracer = dropped.get_tracer("bench")
    histogram = meters.get_meter("bench").create_histogram("bench.duration")
    # what nexus.otel hands the SDK for a call of `noop`
    span_attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "noop",
                       "gen_ai.tool.call.id": "call_0123456789abcdef01234567", "gen_ai.tool.type": "function",
                       "gen_ai.tool.description": "does nothing"}
    metric_attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "noop"}

    def sdk_span() -> None:
        tracer.start_span("execute_tool noop", kind=SpanKind.INTERNAL, attributes=span_attributes).end()

    def make_current() -> None:
        otel_context.detach(otel_context.attach(trace.set_span_in_context(trace.INVALID_SPAN)))

    # the tracer's two hooks called directly, against the same SDK and API calls they make: the
    # difference is nexus.otel's own work, away from the rest of the call path
    hooks = rows[3][1].plugin("nexus.otel").tracer
    tool = rows[3][1].tool("noop")
    done = ToolResult(id="", name="noop", output="ok")
    ids = itertools.count()

    def tracer_hooks() -> None:
        call = ToolCall(id=f"call_{next(ids):024x}", name="noop", arguments=ARGUMENTS)
        hooks.nexus_tool_call_start(call=call, tool=tool)
        hooks.nexus_tool_result(call=call, result=done)

    def sdk_sequence() -> None:
        ToolCall(id=f"call_{next(ids):024x}", name="noop", arguments=ARGUMENTS)  # as tracer_hooks makes one
        span = sdk_tracer.start_span("execute_tool noop", kind=SpanKind.INTERNAL, attributes=dict(span_attributes))
        token = otel_context.attach(trace.set_span_in_context(span))
        otel_context.detach(token)
        span.end()
        sdk_histogram.record(time.perf_counter() - 1.0, metric_attributes)

    sdk_tracer = dropped.get_tracer("bench")
    sdk_histogram = meters.get_meter("bench").create_histogram("bench.sequence")
    sdk_rows: list[tuple[str, Callable[[], object]]] = [
        ("the SDK alone: a span, 5 attributes", sdk_span),
        ("the API alone: making a span current", make_current),
        ("the SDK alone: a histogram record", lambda: histogram.record(0.001, metric_attributes)),
        ("nexus.otel's two hooks, called alone", tracer_hooks),
        ("the SDK calls they make, alone", sdk_sequence),
    ]
    figures: dict[str, list[float]] = {label: [] for label, _ in [*rows, *sdk_rows]}
    for _ in range(opts.rounds):
        for label, nx in rows:
            fn: Callable[[], object] = lambda nx=nx: nx.invoke("noop", ARGUMENTS)  # noqa: E731
            figures[label].append(measure(fn, opts.batches, opts.batch_size, clock)[0])
        for label, fn in sdk_rows:
            figures[label].append(measure(fn, opts.batches, opts.batch_size, clock)[0])

    print(f"python {platform.python_version()} on {platform.system()} {platform.machine()}, "
          f"{os.cpu_count()} cpus, {time.strftime('%Y-%m-%d')}; {opts.rounds} rounds of "
          f"{opts.batches} batches x {opts.batch_size} calls after warm-up, {opts.clock} time")
    print(f"{'':36}{'p50 per call':>14}{'vs not installed':>20}")
    base = statistics.median(figures[rows[0][0]])
    for label, _ in rows:
        p50 = statistics.median(figures[label])
        print(f"{label:36}{p50 / 1000:>11.2f} us{(p50 - base) / 1000:>+17.2f} us")
    for label, _ in sdk_rows:
        print(f"{label:36}{statistics.median(figures[label]) / 1000:>11.2f} us")
    on = statistics.median(figures[rows[3][0]]) - base
    hooks_cost = statistics.median(figures[rows[2][0]]) - base
    alone = statistics.median(figures[sdk_rows[3][0]])
    sdk = statistics.median(figures[sdk_rows[4][0]])
    print(f"\ntracing on adds {on / 1000:.2f} us per call; calling two observer hooks is {hooks_cost / 1000:.2f} us of "
          f"it. Called alone, nexus.otel's hooks take {alone / 1000:.2f} us, the SDK calls they make "
          f"{sdk / 1000:.2f} us: nexus.otel's own work is {(alone - sdk) / 1000:+.2f} us; the rest, "
          f"{(on - hooks_cost - alone) / 1000:.2f} us, is the same SDK work done amid the call path (colder caches)")
    for _, nx in rows:
        nx.close()
    batched.shutdown()


if __name__ == "__main__":
    sys.exit(main())
