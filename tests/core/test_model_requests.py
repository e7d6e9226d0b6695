"""The model-request path (`Nexus.complete`): providers registered through
`nexus_register_providers`, request gates (`nexus_before_model_request`: veto, replace, deny wins,
raising vetoes), response observers (`nexus_model_response`), streaming and cancellation, and the
config's `model` key."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from nexus_core.llm import Message, ModelCall, ModelError, ModelRequest, ModelResponse, Usage, split_model

from nexus_core import ConfigError, Nexus, ToolCall, Veto, hookimpl


class EchoModel:
    """A provider plugin answering with the last user message, streamed word by word."""

    def __init__(self, name: str = "echo") -> None:
        self.name = name
        self.NEXUS_PLUGIN_ID = f"test.provider.{name}"
        self.requests: list[ModelRequest] = []

    @hookimpl
    def nexus_register_providers(self, register: Any) -> None:
        register(self)

    def complete(self, request: ModelRequest, call: ModelCall) -> ModelResponse:
        self.requests.append(request)
        text = request.messages[-1].text if request.messages else ""
        for word in text.split(" "):
            call.check()
            call.text(word + " ")
        return ModelResponse(text=text, usage=Usage(len(text), 2), stop_reason="stop", model=request.model)


class Observer:
    def __init__(self) -> None:
        self.seen: list[tuple[ModelRequest, ModelResponse]] = []

    @hookimpl
    def nexus_model_response(self, request: ModelRequest, response: ModelResponse) -> None:
        self.seen.append((request, response))


class RequestGate:
    def __init__(self, decide: Any) -> None:
        self.decide = decide

    @hookimpl
    def nexus_before_model_request(self, request: ModelRequest) -> Any:
        return self.decide(request)


def request(text: str = "hello there", provider: str = "echo", **kw: Any) -> ModelRequest:
    return ModelRequest(provider=provider, model="m1", messages=(Message.user(text),), **kw)


def test_a_provider_answers_streams_and_observers_see_the_usage() -> None:
    provider, observer = EchoModel(), Observer()
    with Nexus(autoload=False, plugins=[provider, observer]) as nx:
        assert nx.providers() == {"echo": "test.provider.echo"}
        pieces: list[str] = []
        response = nx.complete(request(), ModelCall(on_text=pieces.append))
    assert response.text == "hello there" and response.usage.total_tokens == 13
    assert "".join(pieces) == "hello there "
    [(seen_request, seen_response)] = observer.seen
    assert seen_response is response and seen_request.id == provider.requests[0].id


def test_an_unknown_provider_names_the_ones_there_are() -> None:
    with Nexus(autoload=False, plugins=[EchoModel()]) as nx, pytest.raises(ModelError) as info:
        nx.complete(request(provider="ecko"))
    assert info.value.kind == "unknown_provider"
    assert str(info.value) == "no model provider 'ecko' (did you mean 'echo'?): the providers here are 'echo'"
    with Nexus(autoload=False) as nx, pytest.raises(ModelError, match="install nexus-rt-provider-openai"):
        nx.complete(request())


def test_check_model_suggests_the_provider_for_a_typo_or_a_plugin_id_and_says_what_to_install() -> None:
    with Nexus(autoload=False, plugins=[EchoModel()]) as nx:
        assert nx.check_model("echo:m1:8b") == ("echo", "m1:8b")
        with pytest.raises(ModelError) as info:
            nx.check_model("ecko:m1")
        assert info.value.kind == "unknown_provider" and "(did you mean 'echo'?)" in str(info.value)
        # the id of the plugin that registered the provider, where the provider's name goes
        with pytest.raises(ModelError, match=r"^no model provider 'test.provider.echo' \(did you mean 'echo'\?\)"):
            nx.check_model("test.provider.echo:m1")
        # a provider this project ships, not installed here: how to get it (no far-fetched guess)
        with pytest.raises(ModelError) as info:
            nx.check_model("anthropic:claude-sonnet-4-5")
        assert str(info.value) == ("no model provider 'anthropic': the providers here are 'echo'; "
                                   "the distribution nexus-rt-provider-anthropic gives 'anthropic'")
        with pytest.raises(ValueError, match="is not provider:model"):
            nx.check_model("gpt-4.1")


def test_two_providers_of_one_name_is_an_error_naming_both() -> None:
    with Nexus(autoload=False, plugins=[EchoModel()]) as nx:
        second = EchoModel()
        second.NEXUS_PLUGIN_ID = "test.provider.other"
        with pytest.raises(ValueError, match="'echo' is registered twice: by test.provider.echo and by test.provider.other"):
            nx.register(second)
        assert nx.providers() == {"echo": "test.provider.echo"}
        nx.unregister("test.provider.echo")  # a plugin's providers leave with it
        assert nx.providers() == {}


def test_a_request_gate_vetoes_and_deny_wins_over_a_replacement() -> None:
    import attrs

    provider = EchoModel()
    veto = RequestGate(lambda r: Veto("no model calls after hours"))
    shorten = RequestGate(lambda r: attrs.evolve(r, max_output_tokens=10) if r.max_output_tokens != 10 else None)
    for order in ([shorten, veto], [veto, shorten]):
        with Nexus(autoload=False, plugins=[provider]) as nx:
            for gate in order:
                nx.register(gate, name="hours" if gate is veto else "shorten")
            with pytest.raises(ModelError) as info:
                nx.complete(request())
        assert info.value.kind == "vetoed" and info.value.plugin == "hours"
        assert str(info.value) == "model request vetoed (gate 'hours'): no model calls after hours"
    assert provider.requests == []


def test_a_replacement_is_what_the_provider_gets_and_can_route_to_another_provider() -> None:
    import attrs

    local, remote = EchoModel("local"), EchoModel("remote")

    def keep_it_local(r: ModelRequest) -> ModelRequest | None:
        secret = any("secret" in m.text for m in r.messages)
        return attrs.evolve(r, provider="local") if secret and r.provider != "local" else None

    with Nexus(autoload=False, plugins=[local, remote, RequestGate(keep_it_local)]) as nx:
        sent = request("the secret plan", provider="remote")
        nx.complete(sent)
        nx.complete(request("the weather", provider="remote"))
    assert [r.messages[-1].text for r in local.requests] == ["the secret plan"]
    assert local.requests[0].id == sent.id  # still the same request
    assert [r.messages[-1].text for r in remote.requests] == ["the weather"]


def test_a_request_gate_that_raises_or_answers_nonsense_vetoes() -> None:
    def broken(r: ModelRequest) -> None:
        raise RuntimeError("quota service down")

    with Nexus(autoload=False, plugins=[EchoModel(), RequestGate(broken)]) as nx:
        with pytest.raises(ModelError, match=r"the gate failed \(RuntimeError: quota service down\)") as info:
            nx.complete(request())
        assert info.value.kind == "vetoed"
    with Nexus(autoload=False, plugins=[EchoModel(), RequestGate(lambda r: True)]) as nx:
        with pytest.raises(ModelError, match="returned bool, not Veto, ModelRequest or None"):
            nx.complete(request())


def test_conflicting_replacements_refuse_the_request() -> None:
    import attrs

    gates = [RequestGate(lambda r, n=n: attrs.evolve(r, max_output_tokens=n) if r.max_output_tokens is None else None)
             for n in (10, 20)]
    with Nexus(autoload=False, plugins=[EchoModel(), *gates]) as nx:
        with pytest.raises(ModelError, match="replaced the request in conflicting ways"):
            nx.complete(request())


def test_a_provider_that_raises_is_a_failed_request() -> None:
    class Broken(EchoModel):
        def complete(self, request: ModelRequest, call: ModelCall) -> ModelResponse:
            raise ConnectionError("connection refused")

    observer = Observer()
    with Nexus(autoload=False, plugins=[Broken(), observer]) as nx, pytest.raises(ModelError) as info:
        nx.complete(request())
    assert info.value.kind == "failed"
    assert str(info.value) == "provider 'echo' failed: ConnectionError: connection refused"
    assert observer.seen == []


def test_cancel_from_another_thread_ends_a_blocked_request() -> None:
    class Slow(EchoModel):
        def __init__(self) -> None:
            super().__init__()
            self.started = threading.Event()
            self.closed = threading.Event()

        def complete(self, request: ModelRequest, call: ModelCall) -> ModelResponse:
            call.on_cancel(self.closed.set)  # what a provider does: close its stream
            self.started.set()
            if not self.closed.wait(30):
                raise AssertionError("never cancelled")
            raise OSError("stream closed")  # what a read on a closed stream raises

    provider = Slow()
    call = ModelCall()
    with Nexus(autoload=False, plugins=[provider]) as nx:
        threading.Thread(target=lambda: (provider.started.wait(30), call.cancel()), daemon=True).start()
        with pytest.raises(ModelError) as info:
            nx.complete(request(), call)
    assert info.value.kind == "cancelled"
    ran: list[int] = []
    call.on_cancel(lambda: ran.append(1))  # registered after the cancel: runs at once
    assert ran == [1]


def test_a_text_callback_that_raises_does_not_end_the_request(caplog: pytest.LogCaptureFixture) -> None:
    def broken(text: str) -> None:
        raise BrokenPipeError

    with Nexus(autoload=False, plugins=[EchoModel()]) as nx:
        assert nx.complete(request("a b c"), ModelCall(on_text=broken)).text == "a b c"
    assert sum("on_text callback" in r.getMessage() for r in caplog.records) == 1


def test_a_host_plugin_whose_register_providers_raises_is_refused() -> None:
    class Bad:
        @hookimpl
        def nexus_register_providers(self, register: Any) -> None:
            register(object())

    with Nexus(autoload=False) as nx, pytest.raises(ValueError, match="needs a `name`"):
        nx.register(Bad())


def test_split_model() -> None:
    assert split_model("openai:gpt-4.1") == ("openai", "gpt-4.1")
    assert split_model("openai:llama3:8b") == ("openai", "llama3:8b")
    for bad in ("gpt-4.1", ":gpt", "openai:", ""):
        with pytest.raises(ValueError, match="is not provider:model"):
            split_model(bad)


def test_the_config_model_key(tmp_path: Path) -> None:
    assert Nexus.from_config({"model": "anthropic:claude-sonnet-4-5"}, autoload=False).config.model == \
        "anthropic:claude-sonnet-4-5"
    assert Nexus(autoload=False).config.model is None
    path = tmp_path / "nexus.yaml"
    path.write_text("workspace: .\nmodel: gpt-4.1\n")
    with pytest.raises(ConfigError) as info:
        Nexus.from_config(str(path), autoload=False)
    assert info.value.problems == [f"{path}:2: model: model 'gpt-4.1' is not provider:model (for example "
                                   "openai:gpt-4.1 or anthropic:claude-sonnet-4-5)"]
    path.write_text("model: 3\n")
    with pytest.raises(ConfigError, match="model"):
        Nexus.from_config(str(path), autoload=False)


def test_messages_hold_calls_and_results() -> None:
    call = ToolCall(name="read", arguments={"path": "a"})
    assert Message.assistant("", (call,)).tool_calls == (call,)
    assert Message.user("hi").role == "user"
    assert (Usage(1, 2) + Usage(3, 4)).total_tokens == 10


SDK_PROVIDER = """
from nexus_core.llm import ModelResponse, SDKProvider

made_clients = []

class Client:
    def __init__(self, key, greeting):
        self.key, self.greeting, self.closed = key, greeting, False
        made_clients.append(self)
    def close(self):
        self.closed = True

class AcmeProvider(SDKProvider["Client"]):
    NEXUS_PLUGIN_ID = "fake.acme"
    name = "acme"

    def config_schema(self):
        return {"type": "object", "properties": {
            "api_key_env": {"type": "string", "default": "ACME_TEST_KEY"},
            "greeting": {"type": "string", "default": "hello"}}}

    def make_client(self):
        key = self.api_key()
        return Client(key, self.config["greeting"]), key

    def send(self, client, request, call):
        assert self.secret == client.key
        return ModelResponse(text=f"{client.greeting} from {request.model}", stop_reason="stop",
                             model=request.model)
"""


def test_an_sdk_provider_gets_its_own_section_makes_its_client_once_and_closes_it(
        fake_plugins: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    module = __import__(fake_plugins.add("fake.acme", SDK_PROVIDER, attr="AcmeProvider"))
    request = ModelRequest(provider="acme", model="m1", messages=[Message("user", "hi")])

    def config(greeting: str) -> dict[str, Any]:
        return {"plugins": {"active": ["fake.acme"], "fake.acme": {"greeting": greeting}}}

    with Nexus(config("hello")) as nx:
        # no client before the first request: listing tools needs no key
        assert module.made_clients == []
        with pytest.raises(ModelError, match=r"no acme API key: the environment variable ACME_TEST_KEY is not set "
                                             r"\(it is the one plugins.fake.acme.api_key_env names\)"):
            nx.complete(request)
        monkeypatch.setenv("ACME_TEST_KEY", "sk-secret-123")
        with Nexus(config("bonjour")) as other:
            assert nx.complete(request).text == "hello from m1"
            assert nx.complete(request).text == "hello from m1"
            assert other.complete(request).text == "bonjour from m1"
            assert len(module.made_clients) == 2  # one per Nexus, each made once
            assert "sk-secret" not in repr(nx.plugin("fake.acme"))
        assert module.made_clients[1].closed and not module.made_clients[0].closed
    assert module.made_clients[0].closed
