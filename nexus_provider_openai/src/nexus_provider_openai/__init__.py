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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nexus_core.llm import SDKProvider

if TYPE_CHECKING:
    import openai
    from nexus_core.llm import ModelCall, ModelRequest, ModelResponse

PLUGIN_ID = "nexus.provider.openai"
PROVIDER = "openai"


def config_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "base_url": {"type": ["string", "null"], "default": None,
                         "description": "the API's base URL (default: the SDK's, or $OPENAI_BASE_URL)"},
            "api_key_env": {"type": ["string", "null"], "pattern": "^[A-Za-z_][A-Za-z0-9_]*$",
                            "default": "OPENAI_API_KEY",
                            "description": "the environment variable holding the API key; null for a "
                                           "server that takes none"},
            "api": {"enum": ["chat", "responses"], "default": "chat",
                    "description": "Chat Completions (any compatible server) or the Responses API"},
            "store": {"type": "boolean", "default": False,
                      "description": "with api: responses, let OpenAI keep the responses (the loop sends "
                                     "the whole conversation each turn either way)"},
            "timeout_seconds": {"type": "number", "exclusiveMinimum": 0, "default": 600},
            "max_retries": {"type": "integer", "minimum": 0, "default": 2},
            "max_tokens_parameter": {"enum": ["max_completion_tokens", "max_tokens"],
                                     "default": "max_completion_tokens",
                                     "description": "how the output limit is sent (older compatible "
                                                    "servers know only max_tokens)"},
            "stream_usage": {"type": "boolean", "default": True,
                             "description": "ask for usage in streamed replies (stream_options)"},
        },
    }


class OpenAIProvider(SDKProvider["openai.OpenAI"]):
    """The plugin object of one Nexus, and the provider it registers (`name` "openai")."""

    NEXUS_PLUGIN_ID = PLUGIN_ID
    name = PROVIDER
    vendor = "OpenAI"

    def config_schema(self) -> dict[str, Any]:
        return config_schema()

    def make_client(self) -> tuple[openai.OpenAI, str | None]:
        from ._chat import make_client

        key = self.api_key()
        return make_client(self.config, key), key

    def send(self, client: openai.OpenAI, request: ModelRequest, call: ModelCall) -> ModelResponse:
        if self.config.get("api") == "responses":
            from ._responses import complete
        else:
            from ._chat import complete
        return complete(client, self.config, request, call, secret=self.secret)


__all__ = ["PLUGIN_ID", "PROVIDER", "OpenAIProvider", "config_schema"]
