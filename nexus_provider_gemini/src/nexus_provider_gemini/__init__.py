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

import threading
from typing import TYPE_CHECKING, Any

from nexus_core.llm import SDKProvider
from nexus_core.plugins import Plugin

from ._settings import Settings

if TYPE_CHECKING:
    from google import genai
    from nexus_core.llm import ModelCall, ModelRequest, ModelResponse

    from nexus_core import Nexus

PLUGIN_ID = "nexus.provider.gemini"
PROVIDER = "gemini"


class GeminiProvider(SDKProvider["genai.Client"], Plugin[Settings]):
    """The plugin object of one Nexus, and the provider it registers (`name` "gemini")."""

    NEXUS_PLUGIN_ID = PLUGIN_ID
    name = PROVIDER
    vendor = "Gemini"
    settings: Settings

    def __init__(self, nexus: Nexus) -> None:
        super().__init__(nexus)
        # the request a thread is sending: its HTTP response, once it comes, is what cancelling
        # the request closes (the SDK's stream is a generator, which another thread cannot close)
        self._sending = threading.local()

    def make_client(self) -> tuple[genai.Client, str | None]:
        from ._generate import make_client

        key = self.api_key()
        return make_client(self.settings, key, on_response=self._on_response), key

    def send(self, client: genai.Client, request: ModelRequest, call: ModelCall) -> ModelResponse:
        from ._generate import complete

        self._sending.call = call
        try:
            return complete(client, self.settings, request, call, secret=self.secret)
        finally:
            self._sending.call = None

    def _on_response(self, response: Any) -> None:  # an httpx (or httpx2) Response
        call = getattr(self._sending, "call", None)
        if call is not None:
            call.on_cancel(response.close)


__all__ = ["PLUGIN_ID", "PROVIDER", "GeminiProvider", "Settings"]
