"""Model requests: what an agent loop sends a model and gets back, in no provider's format, and
what a provider plugin implements (`ModelProvider`, or `SDKProvider` for one on a vendor's SDK).

Every request goes through `Nexus.complete(request)`: the request gates, the provider that
`request.provider` names, the response observers. See docs/agent.md.
"""

from ._config import split_model
from ._httpstop import RequestCancelled, http_library, make_stoppable, stopping
from ._llm import (
    Message,
    ModelCall,
    ModelError,
    ModelErrorKind,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    SDKProvider,
    Usage,
)

__all__ = [
    "Message",
    "ModelCall",
    "ModelError",
    "ModelErrorKind",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "RequestCancelled",
    "SDKProvider",
    "Usage",
    "http_library",
    "make_stoppable",
    "split_model",
    "stopping",
]
