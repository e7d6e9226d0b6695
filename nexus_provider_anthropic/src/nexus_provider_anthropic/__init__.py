"""The `nexus.provider.anthropic` plugin: the model provider `anthropic` (Claude), on the official
`anthropic` SDK and its Messages API. Configured from `plugins.nexus.provider.anthropic`:

```yaml
model: anthropic:claude-sonnet-4-5
plugins:
  nexus.provider.anthropic: {api_key_env: ANTHROPIC_API_KEY}
```

The API key is read from the environment variable `api_key_env` names, when the first request is
made; it is handed to the SDK and nowhere else: never logged, written or put in an error message.
The plugin is `AnthropicProvider`, its settings `Settings`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nexus_core.llm import SDKProvider
from nexus_core.plugins import Plugin

from ._settings import Settings

if TYPE_CHECKING:
    import anthropic
    from nexus_core.llm import ModelCall, ModelRequest, ModelResponse

PLUGIN_ID = "nexus.provider.anthropic"
PROVIDER = "anthropic"


class AnthropicProvider(SDKProvider["anthropic.Anthropic"], Plugin[Settings]):
    """The plugin object of one Nexus, and the provider it registers (`name` "anthropic")."""

    NEXUS_PLUGIN_ID = PLUGIN_ID
    name = PROVIDER
    vendor = "Anthropic"
    settings: Settings

    def make_client(self) -> tuple[anthropic.Anthropic, str | None]:
        from ._messages import make_client

        key = self.api_key()
        return make_client(self.settings, key), key

    def send(self, client: anthropic.Anthropic, request: ModelRequest, call: ModelCall) -> ModelResponse:
        from ._messages import complete

        return complete(client, self.settings, request, call, secret=self.secret,
                        tool_settings=self.nexus.config.tool_settings)


__all__ = ["PLUGIN_ID", "PROVIDER", "AnthropicProvider", "Settings"]
