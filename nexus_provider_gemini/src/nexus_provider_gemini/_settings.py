"""The provider's settings (`plugins.nexus.provider.gemini`): an attrs class, from which the
config section's JSON Schema is derived (`nexus_core.plugins.settings_schema`)."""

from __future__ import annotations

import attrs
from nexus_core.plugins import setting

#: an environment variable's name
VARIABLE = "^[A-Za-z_][A-Za-z0-9_]*$"


@attrs.frozen
class Settings:
    """How one Nexus reaches the Gemini API."""

    base_url: str | None = setting(
        None, description="the API's base URL (default: the SDK's, or $GOOGLE_GEMINI_BASE_URL)")
    api_version: str | None = setting(None, pattern="^v[0-9a-z]+$",
                                      description="the API version in the URL (default: the SDK's, v1beta)")
    api_key_env: str = setting("GEMINI_API_KEY", pattern=VARIABLE,
                               description="the environment variable holding the API key")
    timeout_seconds: float = setting(600, exclusiveMinimum=0)
    max_retries: int = setting(2, minimum=0)
