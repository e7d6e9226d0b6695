"""The `nexus.provider.gemini` plugin: the model provider `gemini`, on Google's official
`google-genai` SDK and the Gemini API's generateContent. Configured from
`plugins.nexus.provider.gemini`:

```yaml
model: gemini:gemini-2.5-flash
plugins:
  nexus.provider.gemini: {api_key_env: GEMINI_API_KEY}
```

The API key is read from the environment variable `api_key_env` names, when the first request is
made; it is handed to the SDK and nowhere else: never logged, written or put in an error message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nexus_core.llm import SDKProvider

from nexus_core import hookimpl

if TYPE_CHECKING:
    from google import genai
    from nexus_core.llm import ModelCall, ModelRequest, ModelResponse

PLUGIN_ID = "nexus.provider.gemini"
PROVIDER = "gemini"


def config_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "base_url": {"type": ["string", "null"], "default": None,
                         "description": "the API's base URL (default: the SDK's, or $GOOGLE_GEMINI_BASE_URL)"},
            "api_version": {"type": ["string", "null"], "pattern": "^v[0-9a-z]+$", "default": None,
                            "description": "the API version in the URL (default: the SDK's, v1beta)"},
            "api_key_env": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$",
                            "default": "GEMINI_API_KEY",
                            "description": "the environment variable holding the API key"},
            "timeout_seconds": {"type": "number", "exclusiveMinimum": 0, "default": 600},
            "max_retries": {"type": "integer", "minimum": 0, "default": 2},
        },
    }


class GeminiProvider(SDKProvider["genai.Client"]):
    """The plugin object of one Nexus, and the provider it registers (`name` "gemini")."""

    NEXUS_PLUGIN_ID = PLUGIN_ID
    name = PROVIDER
    vendor = "Gemini"

    #: the HTTP client the SDK client sends through: ours to close (the SDK leaves it open)
    _http_client: Any = None

    def config_schema(self) -> dict[str, Any]:
        return config_schema()

    def make_client(self) -> tuple[genai.Client, str | None]:
        from ._generate import http_client, make_client

        key = self.api_key()
        self._http_client = http_client()
        return make_client(self.config, key, self._http_client), key

    @hookimpl
    def nexus_shutdown(self) -> None:
        super().nexus_shutdown()
        client, self._http_client = self._http_client, None
        if client is not None:
            client.close()

    def send(self, client: genai.Client, request: ModelRequest, call: ModelCall) -> ModelResponse:
        from ._generate import complete

        return complete(client, self.config, request, call, secret=self.secret)


__all__ = ["PLUGIN_ID", "PROVIDER", "GeminiProvider", "config_schema"]
