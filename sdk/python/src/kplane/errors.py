"""Errors raised by the SDK.

Every answer of the server that is not a success raises :class:`ApiError`
(or one of its subclasses, chosen by HTTP status code) carrying the
Kubernetes ``Status`` the server sent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "KplaneError",
    "TransportError",
    "WaitTimeoutError",
    "Status",
    "ApiError",
    "BadRequestError",
    "UnauthorizedError",
    "ForbiddenError",
    "NotFoundError",
    "ConflictError",
    "GoneError",
    "InvalidError",
    "TooManyRequestsError",
    "ServerError",
]


class KplaneError(Exception):
    """Base class of every error the SDK raises."""


class TransportError(KplaneError):
    """The server could not be reached, or the connection failed (TLS included)."""


class WaitTimeoutError(KplaneError, TimeoutError):
    """A ``wait_until_*`` call gave up before the condition held."""


@dataclass(frozen=True)
class Status:
    """A Kubernetes ``Status`` (``kind: Status, apiVersion: v1``), the body of every error."""

    code: int
    reason: str = ""
    message: str = ""
    status: str = "Failure"
    details: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any], code: int | None = None) -> "Status":
        """Build a Status from its JSON form; ``code`` fills in a missing code."""
        return cls(
            code=int(data.get("code") or code or 0),
            reason=str(data.get("reason") or ""),
            message=str(data.get("message") or ""),
            status=str(data.get("status") or "Failure"),
            details=dict(data.get("details") or {}),
            raw=data,
        )

    @classmethod
    def from_response(cls, code: int, body: bytes, http_reason: str = "") -> "Status":
        """Read the Status of an error answer; bodies that are not a Status
        (plain-text probes, proxies) become one with the text as message."""
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            data = None
        if isinstance(data, dict) and data.get("kind") == "Status":
            return cls.from_dict(data, code)
        text = body.decode("utf-8", "replace").strip() if body else ""
        return cls(code=code, reason=_reason_for(code, http_reason), message=text or http_reason)


def _reason_for(code: int, http_reason: str) -> str:
    return {
        400: "BadRequest",
        401: "Unauthorized",
        403: "Forbidden",
        404: "NotFound",
        405: "MethodNotAllowed",
        409: "Conflict",
        410: "Expired",
        422: "Invalid",
        429: "TooManyRequests",
        500: "InternalError",
        503: "ServiceUnavailable",
        504: "Timeout",
    }.get(code, http_reason.replace(" ", ""))


class ApiError(KplaneError):
    """The server answered with an error; :attr:`status` is its Kubernetes Status."""

    def __init__(self, status: Status, method: str = "", path: str = "") -> None:
        self.status = status
        self.method = method
        self.path = path
        where = f" ({method} {path})" if method else ""
        super().__init__(f"{status.code} {status.reason}: {status.message}{where}")

    @property
    def code(self) -> int:
        """The HTTP status code."""
        return self.status.code

    @property
    def reason(self) -> str:
        """The machine-readable reason (``NotFound``, ``AlreadyExists``, ``Expired``, ...)."""
        return self.status.reason

    @property
    def message(self) -> str:
        """The server's human-readable explanation."""
        return self.status.message

    @staticmethod
    def from_status(status: Status, method: str = "", path: str = "") -> "ApiError":
        """The most specific ApiError subclass for ``status.code``."""
        cls = _BY_CODE.get(status.code)
        if cls is None:
            cls = ServerError if status.code >= 500 else ApiError
        return cls(status, method, path)


class BadRequestError(ApiError):
    """400: a malformed request (unknown resource, bad parameter)."""


class UnauthorizedError(ApiError):
    """401: no valid credentials."""


class ForbiddenError(ApiError):
    """403: the credentials may not do this."""


class NotFoundError(ApiError):
    """404: no such object, plane or path."""


class ConflictError(ApiError):
    """409: the object exists already, changed meanwhile, or its plane is being deleted."""


class GoneError(ApiError):
    """410: a resourceVersion is too old; take a new snapshot and watch from it."""


class InvalidError(ApiError):
    """422: the object fails validation; ``status.details['causes']`` names the fields."""


class TooManyRequestsError(ApiError):
    """429: the server is at its limit of requests in flight."""


class ServerError(ApiError):
    """5xx: the server failed or is not ready."""


_BY_CODE: dict[int, type[ApiError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    410: GoneError,
    422: InvalidError,
    429: TooManyRequestsError,
}
