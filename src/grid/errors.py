"""The one exception tree of Grid.

Every error Grid raises on purpose is a `GridError`. Decoders of untrusted bytes
raise only `ProtocolError` subclasses, each with a stable `code`. Refusals that
map to an HTTP answer carry their `status`. Foreign exceptions are translated at
the edge with ``raise ... from exc``.
"""

from __future__ import annotations


class GridError(Exception):
    """Base class of every error Grid raises on purpose."""

    code: str = "grid_error"

    def __init__(self, message: str = "", *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        """The human-readable message, without the code."""
        return str(self.args[0]) if self.args else ""


class ProtocolError(GridError):
    """Untrusted bytes could not be decoded; `code` says why."""

    code = "protocol_error"


class ValidationError(GridError):
    """A resource or document failed validation; `path` names the field."""

    code = "invalid"

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class TransitionError(GridError):
    """An illegal phase transition was requested; state is left unchanged."""

    code = "illegal_transition"


class Conflict(GridError):
    """An optimistic-concurrency write used a stale `resourceVersion`."""

    code = "conflict"


class NotFound(GridError):
    """The named resource does not exist."""

    code = "not_found"


class AlreadyExists(GridError):
    """A create named a resource that already exists."""

    code = "already_exists"


class Refusal(GridError):
    """A request refused with a stable wire `code` and an HTTP `status`."""

    status: int = 400
    retry_after_s: float | None = None
