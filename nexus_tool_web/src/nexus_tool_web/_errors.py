"""The two ways a fetch ends without a page: it failed, or a rule refused it. Each carries the
message the model reads, which says what went wrong and, for a refusal, which rule and which
setting changes it."""

from __future__ import annotations


class FetchError(Exception):
    """A fetch that cannot give a result (a timeout, a bad URL, a connection that failed)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class Refused(FetchError):
    """A safety rule said no. `reason` names the rule; the message starts with `refused:`."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"refused: {reason}")
        self.reason = reason

    def on_redirect(self, hop: int, source: str) -> Refused:
        """The same refusal, saying which redirect led to it."""
        return Refused(f"{self.reason} (redirect {hop}, from {source})")
