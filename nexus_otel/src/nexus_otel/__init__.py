"""The `nexus.otel` plugin: OpenTelemetry traces and metrics of a Nexus, by the GenAI semantic
conventions: an `execute_tool {tool}` span per tool call (run_code's span the parent of its
inner calls'), `chat {model}` per model request (its messages too when content is captured),
`invoke_agent nexus` per agent task, each gate's decision an event on its call's span; `gen_ai.execute_tool.duration` and run_code's
run duration and inner-call count as metrics.

    plugins:
      nexus.otel:
        enabled: null            # null: trace when an OTEL_* exporter is set or the host set providers
        capture_content: null    # record arguments, results and messages; null: OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT

Exporters are configured the standard way, by the `OTEL_*` variables (see `_setup`). When
nothing asks for tracing the plugin registers no hook on the call path: installed and off costs
nothing. A host that has its own providers passes them in:

    Nexus(plugins=[OtelPlugin.using(tracer_provider, meter_provider)])

See docs/observability.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
from nexus_core import Nexus, hookimpl
from nexus_core.plugins import Plugin, setting

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from ._tracer import Tracer

__version__ = "0.1.0"
PLUGIN_ID = "nexus.otel"
#: the name the hooks that trace are registered under, beside the plugin
TRACER_NAME = f"{PLUGIN_ID}:tracer"
CAPTURE_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

__all__ = ["PLUGIN_ID", "OtelPlugin", "OtelSettings"]


@attrs.frozen
class OtelSettings:
    enabled: bool | None = setting(None, description=(
        "trace this Nexus: true, false, or null (the default) to trace when an OTEL_* exporter is configured "
        "or the host has set OpenTelemetry providers"))
    capture_content: bool | None = setting(None, description=(
        "record tool arguments and results (gen_ai.tool.call.arguments / .result) and model requests' messages "
        "(gen_ai.input.messages, gen_ai.output.messages, gen_ai.system_instructions) on spans; null (the "
        f"default) follows {CAPTURE_VARIABLE}"))


class OtelPlugin(Plugin[OtelSettings]):
    """The plugin of one Nexus: decides at start whether to trace, and if so registers a `Tracer`
    (the hooks) with the Nexus's plugin manager; `tracer` is it, or None when off."""

    NEXUS_PLUGIN_ID = PLUGIN_ID

    def __init__(self, nexus: Nexus, tracer_provider: TracerProvider | None = None,
                 meter_provider: MeterProvider | None = None) -> None:
        super().__init__(nexus)
        self._given = (tracer_provider, meter_provider)
        self.tracer: Tracer | None = None
        self._built: TracerProvider | None = None

    @classmethod
    def using(cls, tracer_provider: TracerProvider | None = None,
              meter_provider: MeterProvider | None = None) -> Callable[[Nexus], OtelPlugin]:
        """A plugin factory for `Nexus(plugins=[...])` that traces to these providers (a missing
        one: OpenTelemetry's global, a no-op unless the host set one), whatever the variables."""

        def make(nexus: Nexus) -> OtelPlugin:
            return cls(nexus, tracer_provider, meter_provider)

        make.NEXUS_PLUGIN_ID = PLUGIN_ID  # type: ignore[attr-defined]
        return make

    def configure(self) -> None:
        from . import _setup

        env = os.environ
        settings = self.settings
        given = self._given != (None, None)
        if settings.enabled is False or (not given and _setup.sdk_disabled(env)):
            return
        if given:
            from opentelemetry import metrics, trace

            tracer_provider = self._given[0] or trace.get_tracer_provider()
            meter_provider = self._given[1] or metrics.get_meter_provider()
        else:
            providers = _setup.global_sdk_providers()
            if providers is None:
                if not (settings.enabled or _setup.exporter_asked(env)):
                    return
                providers = _setup.build_providers(env)
                self._built = providers[0]
            tracer_provider, meter_provider = providers
        capture = settings.capture_content
        if capture is None:
            capture = env.get(CAPTURE_VARIABLE, "").strip().lower() == "true"
        from ._tracer import Tracer

        self.tracer = Tracer(tracer_provider, meter_provider, capture_content=capture)
        self.nexus.plugin_manager.register(self.tracer, name=TRACER_NAME)

    @hookimpl
    def nexus_shutdown(self, nexus: Any) -> None:
        if self.tracer is not None:
            if self.nexus.plugin_manager.is_registered(self.tracer):
                self.nexus.plugin_manager.unregister(self.tracer)
            self.tracer = None
        if self._built is not None:
            # the providers are the process's (the MCP SDK's spans use them too) and shut down
            # when it exits; what this Nexus traced is sent now
            force_flush = getattr(self._built, "force_flush", None)
            if force_flush is not None:
                force_flush()
            from opentelemetry import metrics

            meter_provider = metrics.get_meter_provider()
            if hasattr(meter_provider, "force_flush"):
                meter_provider.force_flush()
