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
The plugin is `GeminiProvider`, its settings `Settings`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nexus_core.llm import SDKProvider
from nexus_core.plugins import Plugin

from ._settings import Settings

from nexus_core import hookimpl

if TYPE_CHECKING:
    from google import genai
    from nexus_core.llm import ModelCall, ModelRequest, ModelResponse

PLUGIN_ID = "nexus.provider.gemini"
PROVIDER = "gemini"


class GeminiProvider(SDKProvider["genai.Client"], Plugin[Settings]):
    """The plugin object of one Nexus, and the provider it registers (`name` "gemini")."""

    NEXUS_PLUGIN_ID = PLUGIN_ID
    name = PROVIDER
    vendor = "Gemini"
    settings: Settings

    #: the HTTP client the SDK client sends through: ours to close (the SDK leaves it open)
    _http_client: Any = None

    def make_client(self) -> tuple[genai.Client, str | None]:
        from ._generate import http_client, make_client

        key = self.api_key()
        self._http_client = http_client()
        return make_client(self.settings, key, self._http_client), key

    @hookimpl
    def nexus_shutdown(self) -> None:
        super().nexus_shutdown()
        client, self._http_client = self._http_client, None
        if client is not None:
            client.close()

    def send(self, client: genai.Client, request: ModelRequest, call: ModelCall) -> ModelResponse:
        from ._generate import complete

        return complete(client, self.settings, request, call, secret=self.secret)


__all__ = ["PLUGIN_ID", "PROVIDER", "GeminiProvider", "Settings"]
