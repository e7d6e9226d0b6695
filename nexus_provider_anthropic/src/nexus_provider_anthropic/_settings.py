"""The provider's settings (`plugins.nexus.provider.anthropic`): an attrs class, from which the
config section's JSON Schema is derived (`nexus_core.plugins.settings_schema`)."""

from __future__ import annotations

import attrs
from nexus_core.plugins import setting

#: an environment variable's name
VARIABLE = "^[A-Za-z_][A-Za-z0-9_]*$"


@attrs.frozen
class Settings:
    """How one Nexus reaches Anthropic's Messages API."""

    base_url: str | None = setting(
        None, description="the API's base URL (default: the SDK's, or $ANTHROPIC_BASE_URL)")
    api_key_env: str = setting("ANTHROPIC_API_KEY", pattern=VARIABLE,
                               description="the environment variable holding the API key")
    timeout_seconds: float = setting(600, exclusiveMinimum=0)
    max_retries: int = setting(2, minimum=0)
    prompt_caching: bool = setting(True, description="mark the tools, system prompt and conversation for "
                                                     "Anthropic's prompt cache, which each turn repeats")
