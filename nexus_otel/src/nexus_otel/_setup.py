"""Whether this Nexus traces, and the OpenTelemetry providers it traces to.

Configured the standard way, by the `OTEL_*` variables, as the SDK's own auto-configuration
(`opentelemetry-instrument`) reads them, so a collector set up for other services works here:

- `OTEL_SDK_DISABLED=true`: nothing is traced.
- the host made its own providers (`opentelemetry.trace.set_tracer_provider` with an SDK
  `TracerProvider`, say): those are used, exporters and all; nothing here builds another.
- otherwise an exporter must be asked for: `OTEL_EXPORTER_OTLP_ENDPOINT` or
  `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (OTLP, over HTTP/protobuf unless
  `OTEL_EXPORTER_OTLP_PROTOCOL` says `grpc`, which needs opentelemetry-exporter-otlp-proto-grpc)
  or `OTEL_TRACES_EXPORTER` (`otlp`, `console`, any installed exporter's entry-point name,
  comma-separated). Then a tracer and a meter provider are made, with `OTEL_SERVICE_NAME` and
  `OTEL_RESOURCE_ATTRIBUTES` (default service name `nexus`), a batch span processor
  (`OTEL_BSP_*`) and a periodic metric reader (`OTEL_METRIC_EXPORT_INTERVAL`), and set as the
  process's global providers, so that the MCP SDK's spans (its client and server spans, which
  carry the trace across the hop) go to the same place. Each exporter reads its own
  `OTEL_EXPORTER_OTLP_*` settings (headers, timeout, compression).

With none of these, the plugin registers nothing: the call path does not know it is installed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from nexus_core.plugins import SettingError

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

#: the exporter names OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER take for OTLP, by protocol
_OTLP_BY_PROTOCOL = {"http/protobuf": "otlp_proto_http", "grpc": "otlp_proto_grpc", "http/json": "otlp_proto_http"}


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() == "true"


def exporter_asked(env: Mapping[str, str]) -> bool:
    """Whether the variables ask for traces to go somewhere."""
    if env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return True
    return env.get("OTEL_TRACES_EXPORTER", "").strip().lower() not in ("", "none")


def sdk_disabled(env: Mapping[str, str]) -> bool:
    return _flag(env, "OTEL_SDK_DISABLED")


def global_sdk_providers() -> tuple[TracerProvider, MeterProvider] | None:
    """The process's providers when the host (or another Nexus) set SDK ones, else None."""
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.trace import TracerProvider as SDKTracerProvider

    tracer_provider = trace.get_tracer_provider()
    if isinstance(tracer_provider, SDKTracerProvider):
        return tracer_provider, metrics.get_meter_provider()
    return None


def _exporter_names(env: Mapping[str, str], signal: str) -> list[str]:
    variable = f"OTEL_{signal.upper()}_EXPORTER"
    endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
    raw = env.get(variable)
    if raw is None:
        raw = "otlp" if endpoint else "none"
    names = [name.strip().lower() for name in raw.split(",") if name.strip()]
    if "none" in names:
        return []
    protocol = (env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL")
                or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf").strip().lower()
    return [_OTLP_BY_PROTOCOL.get(protocol, protocol) if name == "otlp" else name for name in names]


def _load_exporter(group: str, name: str, variable: str) -> Any:
    found = {ep.name: ep for ep in entry_points(group=group)}
    if name not in found:
        hint = " (pip install opentelemetry-exporter-otlp-proto-grpc)" if name == "otlp_proto_grpc" else ""
        raise SettingError("enabled", f"{variable} asks for the exporter {name!r}, which is not installed{hint}; "
                                      f"installed: {', '.join(sorted(found)) or 'none'}")
    return found[name].load()()


def build_providers(env: Mapping[str, str] | None = None) -> tuple[TracerProvider, MeterProvider]:
    """A tracer and a meter provider exporting where the variables say, set as the process's
    global providers (the first time: after that, the global ones are returned)."""
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider as SDKMeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import OTEL_SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider as SDKTracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    env = os.environ if env is None else env
    existing = global_sdk_providers()
    if existing is not None:
        return existing
    resource = Resource.create({} if env.get(OTEL_SERVICE_NAME) else {"service.name": "nexus"})
    tracer_provider = SDKTracerProvider(resource=resource)
    for name in _exporter_names(env, "traces"):
        exporter = _load_exporter("opentelemetry_traces_exporter", name, "OTEL_TRACES_EXPORTER")
        tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
    readers = [PeriodicExportingMetricReader(_load_exporter("opentelemetry_metrics_exporter", name,
                                                            "OTEL_METRICS_EXPORTER"))
               for name in _exporter_names(env, "metrics")]
    meter_provider = SDKMeterProvider(resource=resource, metric_readers=readers)
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    return tracer_provider, meter_provider
