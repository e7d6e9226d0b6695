"""The provider's settings (`plugins.nexus.provider.openai`): an attrs class, from which the
config section's JSON Schema is derived (`nexus_core.plugins.settings_schema`)."""

from __future__ import annotations

from typing import Literal

import attrs
from nexus_core.plugins import setting

#: an environment variable's name
VARIABLE = "^[A-Za-z_][A-Za-z0-9_]*$"


@attrs.frozen
class Settings:
    """How one Nexus reaches OpenAI or a server compatible with it."""

    base_url: str | None = setting(None, description="the API's base URL (default: the SDK's, or $OPENAI_BASE_URL)")
    api_key_env: str | None = setting("OPENAI_API_KEY", pattern=VARIABLE,
                                      description="the environment variable holding the API key; null for a server "
                                                  "that takes none")
    api: Literal["chat", "responses"] = setting(
        "chat", description="Chat Completions (any compatible server) or the Responses API")
    store: bool = setting(False, description="with api: responses, let OpenAI keep the responses (the loop sends the "
                                             "whole conversation each turn either way)")
    timeout_seconds: float = setting(600, exclusiveMinimum=0)
    max_retries: int = setting(2, minimum=0)
    max_tokens_parameter: Literal["max_completion_tokens", "max_tokens"] = setting(
        "max_completion_tokens",
        description="how the output limit is sent (older compatible servers know only max_tokens)")
    stream_usage: bool = setting(True, description="ask for usage in streamed replies (stream_options)")
