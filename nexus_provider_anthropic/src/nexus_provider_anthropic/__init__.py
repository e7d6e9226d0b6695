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

import threading
from typing import TYPE_CHECKING, Any

from nexus_core import hookimpl

if TYPE_CHECKING:
    import anthropic

    from nexus_core import ModelCall, ModelRequest, ModelResponse, Nexus

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
        },
    }


class AnthropicProvider:
    """The plugin object of one Nexus, and the provider it registers (`name` "anthropic")."""

    NEXUS_PLUGIN_ID = PLUGIN_ID
    name = PROVIDER

    def __init__(self, nexus: Nexus) -> None:
        self.nexus = nexus
        self.config: dict[str, Any] = {}
        self._client: anthropic.Anthropic | None = None
        self._key: str | None = None
        self._lock = threading.Lock()

    @hookimpl
    def nexus_config_schema(self) -> dict[str, Any]:
        return config_schema()

    @hookimpl
    def nexus_configure(self, config: dict[str, Any]) -> None:
        self.config = dict(config)

    @hookimpl
    def nexus_register_providers(self, register: Any) -> None:
        register(self)

    @hookimpl
    def nexus_shutdown(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def client(self) -> anthropic.Anthropic:
        """The SDK client, made on first use (raises ModelError when the key is missing)."""
        with self._lock:
            if self._client is None:
                from ._messages import make_client

                self._client, self._key = make_client(self.config)
            return self._client

    def complete(self, request: ModelRequest, call: ModelCall) -> ModelResponse:
        from ._messages import complete

        return complete(self.client(), self.config, request, call, secret=self._key,
                        tool_settings=self.nexus.config.tool_settings)

    def __repr__(self) -> str:  # never the client's, which holds the key
        return f"<AnthropicProvider base_url={self.config.get('base_url')!r}>"


__all__ = ["PLUGIN_ID", "PROVIDER", "AnthropicProvider", "config_schema"]
