"""Python SDK for kplane: many isolated Kubernetes control planes ("planes")
served by one server.

>>> import kplane
>>> client = kplane.Client("https://127.0.0.1:6443", token="...", ca_file="ca.crt")
>>> snap = client.plane("team-alpha").state()
>>> with client.ephemeral_fleet("rl", replicas=8) as fleet:
...     fleet.wait_until_ready(timeout=60)
...     states = [p.state() for p in fleet.planes()]

Standard library only. :mod:`kplane.aio` has the same surface on asyncio;
:mod:`kplane.openapi` ships the contract the SDK is built against.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .client import FLEET_LABEL, ROOT, AuditWatch, Client, Fleet, Plane, StateWatch  # noqa: E402
from .errors import (  # noqa: E402
    ApiError,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    GoneError,
    InvalidError,
    KplaneError,
    NotFoundError,
    ServerError,
    Status,
    TooManyRequestsError,
    TransportError,
    UnauthorizedError,
    WaitTimeoutError,
)
from . import openapi  # noqa: E402,F401
from .kubeconfig import KubeconfigError  # noqa: E402
from .models import (  # noqa: E402
    AuditEvent,
    Condition,
    FleetMember,
    FleetSpec,
    FleetStatus,
    PlaneInfo,
    PlaneLimits,
    PlaneUsage,
    Snapshot,
    SnapshotResource,
    StateEvent,
)

__all__ = [
    "__version__",
    "ROOT",
    "FLEET_LABEL",
    "Client",
    "Plane",
    "Fleet",
    "StateWatch",
    "AuditWatch",
    "AuditEvent",
    "Snapshot",
    "SnapshotResource",
    "StateEvent",
    "PlaneInfo",
    "PlaneLimits",
    "PlaneUsage",
    "FleetSpec",
    "FleetStatus",
    "FleetMember",
    "Condition",
    "Status",
    "KplaneError",
    "TransportError",
    "WaitTimeoutError",
    "KubeconfigError",
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
