"""Model requests: the provider-neutral messages an agent loop sends, the responses it gets, and
the one path every model request takes (`Nexus.complete`).

A provider plugin registers a `ModelProvider` through `nexus_register_providers(register)`; it
turns a `ModelRequest` (system prompt, messages, tools) into a `ModelResponse` (text, tool
calls, usage) with its vendor's SDK. An agent loop never imports a provider: it calls
`nx.complete(request)`, which runs the request gates (`nexus_before_model_request`: veto or
replace, deny wins, a gate that raises vetoes), finds the provider named by `request.provider`,
and shows the response to the observers (`nexus_model_response`). So a gate or a meter sees
every request whichever loop sends it.
"""

from __future__ import annotations

import difflib
import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, Protocol, TypeVar, runtime_checkable

import attrs

from ._cancel import CancelToken
from ._config import split_model
from ._errors import describe_exception
from ._hookcalls import GateRules, quoted
from ._httpstop import RequestCancelled, stopping
from ._markers import hookimpl
from ._models import JSONObject, ToolCall, ToolDef, ToolResult
from ._plugin import Plugin, settings_schema

if TYPE_CHECKING:
    from ._nexus import Nexus
    from ._plugins import NexusPluginManager

log = logging.getLogger("nexus_core")

ModelErrorKind = Literal["unknown_provider", "vetoed", "cancelled", "failed"]


def _new_request_id() -> str:
    return "req_" + os.urandom(12).hex()


@attrs.frozen
class Usage:
    """Tokens a model request used, as the provider reported them (0 when it did not)."""

    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens)


@attrs.frozen
class Message:
    """One message of a conversation, in no provider's format: the person's text ("user"), the
    model's text and tool calls ("assistant"), or the results of those calls ("tool", in the
    order of the calls). Providers translate it to their wire format."""

    role: Literal["user", "assistant", "tool"]
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()

    @classmethod
    def user(cls, text: str) -> Message:
        return cls("user", text)

    @classmethod
    def assistant(cls, text: str = "", tool_calls: tuple[ToolCall, ...] = ()) -> Message:
        return cls("assistant", text, tuple(tool_calls))

    @classmethod
    def tool(cls, results: tuple[ToolResult, ...]) -> Message:
        return cls("tool", tool_results=tuple(results))


@attrs.frozen
class ModelRequest:
    """What an agent loop asks a model: `model` of `provider`, with a system prompt, the
    conversation so far and the tools it may call. `metadata` is the loop's own (session id,
    turn number), for gates and observers; providers ignore it."""

    provider: str
    model: str
    messages: tuple[Message, ...] = ()
    system: str = ""
    tools: tuple[ToolDef, ...] = ()
    max_output_tokens: int | None = None
    id: str = attrs.field(factory=_new_request_id)
    metadata: JSONObject = attrs.field(factory=dict)


@attrs.frozen
class ModelResponse:
    """What the model answered: text, tool calls (in order; their ids are the provider's), the
    tokens used, and why it stopped in the provider's own words ("stop", "end_turn",
    "tool_calls", "length", ...). `model` is the model that answered, as the provider names it."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    stop_reason: str | None = None
    model: str = ""
    id: str | None = None
    metadata: JSONObject = attrs.field(factory=dict)


class ModelError(Exception):
    """A model request that produced no response. `kind`: "unknown_provider" (no provider of that
    name), "vetoed" (a request gate refused it; `plugin` names the gate), "cancelled" (the caller
    cancelled it), or "failed" (the provider could not get an answer: network, authentication, a
    missing API key, a reply it could not read). The message never holds an API key."""

    def __init__(self, message: str, kind: ModelErrorKind = "failed", plugin: str | None = None) -> None:
        super().__init__(message)
        self.kind: ModelErrorKind = kind
        self.plugin = plugin


class ModelCall:
    """One model request in flight, shared by its caller and the provider: where streamed text
    goes, and whether the caller cancelled it.

    The caller makes one per request (`ModelCall(on_text=print)`) and may call `cancel()` from
    any thread. The provider streams when `stream` is true, hands each piece of text to
    `text(delta)`, checks `cancelled` between events, and registers with `on_cancel(fn)` what
    stops a blocked read at once. An `SDKProvider` whose SDK client is `make_stoppable()`
    needs neither: its requests end when the call is cancelled, before
    the first byte as in the stream. A cancelled call ends in `ModelError(kind="cancelled")`.
    """

    def __init__(self, on_text: Callable[[str], None] | None = None, *, stream: bool = True) -> None:
        self.on_text = on_text
        self.stream = stream
        self.token = CancelToken()
        self._text_failed = False

    @property
    def cancelled(self) -> bool:
        return self.token.cancelled

    def text(self, delta: str) -> None:
        """Pass streamed text to the caller. A caller's callback that raises is logged once and
        not called again: the request itself goes on."""
        if not delta or self.on_text is None or self._text_failed or self.cancelled:
            return
        try:
            self.on_text(delta)
        except Exception:
            self._text_failed = True
            log.exception("the on_text callback of a model request raised; no more text goes to it")

    def on_cancel(self, fn: Callable[[], Any]) -> None:
        """Run `fn` when the call is cancelled (now, if it already is)."""
        self.token.on_cancel(fn)

    def cancel(self) -> None:
        self.token.cancel("the model request was cancelled")

    def check(self) -> None:
        """Raise `ModelError(kind="cancelled")` if the call was cancelled."""
        if self.cancelled:
            raise ModelError("the model request was cancelled", "cancelled")


@runtime_checkable
class ModelProvider(Protocol):
    """What a provider plugin registers: its `name` (the part of `provider:model` before the
    colon) and `complete`, which sends one request with its vendor's SDK. `complete` raises
    `ModelError` for a request that got no answer, with a message fit for the person (it names
    a missing API key's variable, never the key)."""

    name: str

    def complete(self, request: ModelRequest, call: ModelCall) -> ModelResponse: ...


ClientT = TypeVar("ClientT")


class SDKProvider(Plugin[Any], Generic[ClientT]):
    """A base for a provider plugin on a vendor's SDK: the plugin object of one Nexus (name the
    subclass in the `nexus.plugins` entry point), configured from its own `plugins.<id>` section,
    registering itself as the provider `name`, with one SDK client made at its first request (so
    `nexus tools` works without an API key), under a lock, and closed at shutdown.

    A subclass sets `NEXUS_PLUGIN_ID`, `name` (and `vendor`), and implements `make_client()`
    (the client for its settings, and the secret it holds, which errors must be scrubbed of;
    None when there is none: `api_key()` reads the key the `api_key_env` setting names) and
    `send(client, request, call)`. Its settings are those of any plugin, an attrs class named
    beside the client's type, from which the schema is derived:

        class AcmeProvider(SDKProvider["acme.Client"], Plugin[AcmeSettings]): ...

    `self.settings` is then an `AcmeSettings`. (A subclass may instead write the schema itself,
    in `config_schema()`, and read the checked section from `self.config`.) The
    `nexus.provider.openai`, `.anthropic` and `.gemini` plugins are three such subclasses.
    """

    NEXUS_PLUGIN_ID: ClassVar[str]
    name: ClassVar[str]
    #: the vendor as a person knows it, for messages ("OpenAI"); `name` when empty
    vendor: ClassVar[str] = ""

    def __init__(self, nexus: Nexus) -> None:
        super().__init__(nexus)
        #: the checked section of this plugin, defaults applied, as a dict
        self.config: dict[str, Any] = {}
        self._client: ClientT | None = None
        self._secret: str | None = None
        self._lock = threading.Lock()

    def config_schema(self) -> dict[str, Any] | None:
        """The JSON Schema of the plugin's section: derived from its settings class (None: it
        takes no settings). A subclass without a settings class returns its own."""
        return settings_schema(self.settings_class) if self.settings_class is not None else None

    def make_client(self) -> tuple[ClientT, str | None]:
        raise NotImplementedError

    def send(self, client: ClientT, request: ModelRequest, call: ModelCall) -> ModelResponse:
        raise NotImplementedError

    def api_key(self) -> str | None:
        """The API key, from the environment variable that the config's `api_key_env` names
        (None when that setting is null or absent: a server that takes no key). A variable that
        is not set is a ModelError naming it and the setting."""
        env = self.config.get("api_key_env")
        if not env:
            return None
        key = os.environ.get(env)
        if not key:
            raise ModelError(f"no {self.vendor or self.name} API key: the environment variable {env} is not "
                             f"set (it is the one plugins.{self.NEXUS_PLUGIN_ID}.api_key_env names)")
        return key

    @property
    def secret(self) -> str | None:
        """The API key the client holds, once it is made (for scrubbing error messages)."""
        return self._secret

    @hookimpl
    def nexus_config_schema(self) -> dict[str, Any] | None:
        return self.config_schema()

    @hookimpl
    def nexus_configure(self, config: dict[str, Any]) -> None:
        self.config = dict(config)
        super().nexus_configure(config)

    @hookimpl
    def nexus_register_providers(self, register: Callable[[Any], Any]) -> None:
        register(self)

    @hookimpl
    def nexus_shutdown(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        close = getattr(client, "close", None)
        if callable(close):
            close()

    def client(self) -> ClientT:
        """The SDK client, made on first use (`make_client` raises ModelError when, say, the key
        is missing)."""
        with self._lock:
            if self._client is None:
                self._client, self._secret = self.make_client()
            return self._client

    def complete(self, request: ModelRequest, call: ModelCall) -> ModelResponse:
        """`send`, with the HTTP requests it makes through a `make_stoppable()` client ended
        at once when `call` is cancelled."""
        client = self.client()
        with stopping(call.token):
            try:
                return self.send(client, request, call)
            except RequestCancelled:
                raise ModelError("the model request was cancelled", "cancelled") from None

    def __repr__(self) -> str:  # never the client's, which holds the key
        return f"<{type(self).__name__} {self.name!r} base_url={self.config.get('base_url')!r}>"


#: the providers this project ships: name -> the distribution that gives it (for the hint when
#: one of them is asked for and is not here)
SHIPPED_PROVIDERS = {"openai": "nexus-rt-provider-openai", "anthropic": "nexus-rt-provider-anthropic",
                     "gemini": "nexus-rt-provider-gemini"}


class ProviderRegistry:
    """The providers of one Nexus, by name, with the plugin that registered each.

    `left_out`, when given, returns the plugins that are installed but not loaded here (plugin id
    -> "inactive", "blocked" or "failed"): an unknown provider's error then says that the plugin
    is there but not on, rather than to install it."""

    def __init__(self, left_out: Callable[[], dict[str, str]] | None = None) -> None:
        self._providers: dict[str, tuple[ModelProvider, str | None]] = {}
        self._lock = threading.Lock()
        self._left_out = left_out

    def add(self, provider: Any, plugin: str | None) -> ModelProvider:
        name = getattr(provider, "name", None)
        if not isinstance(name, str) or not name or ":" in name:
            raise ValueError(f"a model provider needs a `name` without a colon (the part of provider:model "
                             f"before it), not {name!r}")
        if not callable(getattr(provider, "complete", None)):
            raise TypeError(f"model provider {name!r} has no complete(request, call) method")
        with self._lock:
            if name in self._providers:
                other = self._providers[name][1] or "the host"
                raise ValueError(f"model provider {name!r} is registered twice: by {other} and by "
                                 f"{plugin or 'the host'}")
            self._providers[name] = (provider, plugin)
        registered: ModelProvider = provider
        return registered

    def remove_plugin(self, plugin: str) -> None:
        with self._lock:
            for name in [n for n, (_, p) in self._providers.items() if p == plugin]:
                del self._providers[name]

    def get(self, name: str) -> ModelProvider | None:
        entry = self._providers.get(name)
        return entry[0] if entry else None

    def names(self) -> dict[str, str | None]:
        """provider name -> the plugin that registered it."""
        return {n: p for n, (_, p) in sorted(self._providers.items())}

    def check(self, spec: str) -> tuple[str, str]:
        """`split_model(spec)`, and the provider registered: raises ValueError for a spec that is
        not provider:model, ModelError ("unknown_provider") for a provider that is not here."""
        provider, model = split_model(spec)
        if self.get(provider) is None:
            raise self.unknown(provider)
        return provider, model

    def unknown(self, name: str) -> ModelError:
        """The error for a model naming a provider that is not here: the closest provider (a
        typo, or the plugin's id given for the provider's name), else how to get it."""
        with self._lock:
            known = {n: plugin for n, (_, plugin) in self._providers.items()}
        # a provider by its name, or by the id of the plugin that registered it
        # (`nexus.provider.openai:gpt-4.1` is meant as `openai:gpt-4.1`)
        candidates = {n: n for n in known} | {plugin: n for n, plugin in known.items() if plugin}
        # 0.75: `opnai` and `ecko` are typos of `openai` and `echo`; `nope` is not of `openai`
        close = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.75)
        hint = f" (did you mean {candidates[close[0]]!r}?)" if close else ""
        if known:
            have = f"the providers here are {', '.join(map(repr, sorted(known)))}"
        else:
            have = ("no provider plugin is installed (install nexus-rt-provider-openai, "
                    "nexus-rt-provider-anthropic or nexus-rt-provider-gemini)")
        if not close and name in SHIPPED_PROVIDERS:
            plugin = f"nexus.provider.{name}"
            status = (self._left_out() if self._left_out is not None else {}).get(plugin)
            if status is not None:
                have += f"; the plugin {plugin} is installed but {status} (`nexus plugins` says why)"
            elif known:
                have += f"; the distribution {SHIPPED_PROVIDERS[name]} gives {name!r}"
        return ModelError(f"no model provider {name!r}{hint}: {have}", "unknown_provider")


def _replacement_request(request: ModelRequest, answer: Any) -> ModelRequest | None:
    # a replacement is still the same request: it keeps the id
    return attrs.evolve(answer, id=request.id) if isinstance(answer, ModelRequest) else None


#: how `nexus_before_model_request`'s answers are read (its rules are every gate's, `_hookcalls`)
REQUEST_GATES: GateRules[ModelRequest] = GateRules(
    replace=_replacement_request, same=lambda a, b: a == b, name=lambda plugin: "the gate",
    gates="request gates", replaced="replaced the request", replacing="replacing",
    answers="Veto, ModelRequest or None")


def _send(providers: ProviderRegistry, request: ModelRequest, call: ModelCall) -> ModelResponse:
    """The provider's answer to the request the gates let through; every failure a ModelError."""
    provider = providers.get(request.provider)
    if provider is None:
        raise providers.unknown(request.provider)
    try:
        response = provider.complete(request, call)
    except RequestCancelled:  # a provider of its own that sends through a stoppable client
        raise ModelError("the model request was cancelled", "cancelled") from None
    except ModelError as exc:
        if call.cancelled and exc.kind != "cancelled":
            raise ModelError("the model request was cancelled", "cancelled") from exc
        raise
    except Exception as exc:
        if call.cancelled:  # a stream closed under the provider's feet: that is the cancel
            raise ModelError("the model request was cancelled", "cancelled") from exc
        raise ModelError(f"provider {request.provider!r} failed: {describe_exception(exc)}") from exc
    if not isinstance(response, ModelResponse):
        raise ModelError(f"provider {request.provider!r} returned {type(response).__name__}, not a ModelResponse")
    return response


def complete(pm: NexusPluginManager, providers: ProviderRegistry, request: ModelRequest,
             call: ModelCall | None) -> ModelResponse:
    """The path of one model request; see `Nexus.complete`."""
    if not isinstance(request, ModelRequest):
        raise TypeError(f"complete() takes a ModelRequest, not {type(request).__name__}")
    call = call if call is not None else ModelCall(stream=False)
    pm.notify("nexus_model_request_start", request=request)
    try:
        call.check()
        verdict = pm.gate("nexus_before_model_request", REQUEST_GATES, request, lambda r: {"request": r})
        if verdict.refusal is not None:
            by = f" (gate {quoted(verdict.by)})" if verdict.by else ""
            refused = ModelError(f"model request vetoed{by}: {verdict.refusal}", "vetoed", verdict.by)
            raise refused from verdict.raised
        request = verdict.subject
        response = _send(providers, request, call)
    except BaseException as exc:  # a Ctrl-C in the provider's read ends the request for observers too
        error = exc if isinstance(exc, ModelError) else ModelError(
            f"the model request was interrupted ({describe_exception(exc)})", "cancelled")
        pm.notify("nexus_model_request_error", request=request, error=error)
        raise
    pm.notify("nexus_model_response", request=request, response=response)
    return response
