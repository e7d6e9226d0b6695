"""The `nexus.provider.anthropic` plugin: the model provider `anthropic` (Claude), on the official
`anthropic` SDK and its Messages API. Configured from `plugins.nexus.provider.anthropic`:

```yaml
model: anthropic:claude-sonnet-4-5
plugins:
  nexus.provider.anthropic: {api_key_env: ANTHROPIC_API_KEY}
```

The API key is read from the environment variable `api_key_env` names, when the first request is
made; it is handed to the SDK and nowhere else: never logged, written or put in an error message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nexus_core.llm import SDKProvider

if TYPE_CHECKING:
    import anthropic
    from nexus_core.llm import ModelCall, ModelRequest, ModelResponse

PLUGIN_ID = "nexus.provider.anthropic"
PROVIDER = "anthropic"


def config_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "base_url": {"type": ["string", "null"], "default": None,
                         "description": "the API's base URL (default: the SDK's, or $ANTHROPIC_BASE_URL)"},
            "api_key_env": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$",
                            "default": "ANTHROPIC_API_KEY",
                            "description": "the environment variable holding the API key"},
            "timeout_seconds": {"type": "number", "exclusiveMinimum": 0, "default": 600},
            "max_retries": {"type": "integer", "minimum": 0, "default": 2},
            "prompt_caching": {"type": "boolean", "default": True,
                               "description": "mark the tools, system prompt and conversation for "
                                              "Anthropic's prompt cache, which each turn repeats"},
        },
    }


class AnthropicProvider(SDKProvider["anthropic.Anthropic"]):
    """The plugin object of one Nexus, and the provider it registers (`name` "anthropic")."""

    NEXUS_PLUGIN_ID = PLUGIN_ID
    name = PROVIDER
    vendor = "Anthropic"

    def config_schema(self) -> dict[str, Any]:
        return config_schema()

    def make_client(self) -> tuple[anthropic.Anthropic, str | None]:
        from ._messages import make_client

        key = self.api_key()
        return make_client(self.config, key), key

    def send(self, client: anthropic.Anthropic, request: ModelRequest, call: ModelCall) -> ModelResponse:
        from ._messages import complete

        return complete(client, self.config, request, call, secret=self.secret,
                        tool_settings=self.nexus.config.tool_settings)


__all__ = ["PLUGIN_ID", "PROVIDER", "AnthropicProvider", "config_schema"]
