"""The `nexus.provider.openai` plugin: the model provider `openai`, on the official `openai` SDK.

It speaks the Chat Completions API by default, so it also serves any OpenAI-compatible server (vLLM,
llama.cpp, Ollama, LM Studio, a gateway) through `base_url`; `api: responses` uses the Responses API
instead (for the models only it serves). Configured from `plugins.nexus.provider.openai`:

```yaml
model: openai:gpt-4.1
plugins:
  nexus.provider.openai: {base_url: "http://127.0.0.1:8080/v1", api_key_env: OPENAI_API_KEY}
```

The API key is read from the environment variable `api_key_env` names, when the first request is
made; it is handed to the SDK and nowhere else: never logged, written or put in an error message.
The plugin is `OpenAIProvider`, its settings `Settings`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nexus_core.llm import SDKProvider
from nexus_core.plugins import Plugin

from ._settings import Settings

if TYPE_CHECKING:
    import openai
    from nexus_core.llm import ModelCall, ModelRequest, ModelResponse

PLUGIN_ID = "nexus.provider.openai"
PROVIDER = "openai"


class OpenAIProvider(SDKProvider["openai.OpenAI"], Plugin[Settings]):
    """The plugin object of one Nexus, and the provider it registers (`name` "openai")."""

    NEXUS_PLUGIN_ID = PLUGIN_ID
    name = PROVIDER
    vendor = "OpenAI"
    settings: Settings

    def make_client(self) -> tuple[openai.OpenAI, str | None]:
        from ._chat import make_client

        key = self.api_key()
        return make_client(self.settings, key), key

    def send(self, client: openai.OpenAI, request: ModelRequest, call: ModelCall) -> ModelResponse:
        if self.settings.api == "responses":
            from ._responses import complete
        else:
            from ._chat import complete
        return complete(client, self.settings, request, call, secret=self.secret)


__all__ = ["PLUGIN_ID", "PROVIDER", "OpenAIProvider", "Settings"]
