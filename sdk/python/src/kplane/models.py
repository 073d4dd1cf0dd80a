"""The objects of kplane's API as Python values (see the contract,
``kplane.openapi``). Every model keeps the JSON it was read from in ``raw``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

__all__ = [
    "Snapshot",
    "SnapshotResource",
    "StateEvent",
    "AuditEvent",
    "PlaneInfo",
    "FleetSpec",
    "FleetStatus",
    "FleetMember",
    "Condition",
    "parse_time",
]

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$"
)


def parse_time(value: str | None) -> datetime | None:
    """Parse an RFC 3339 timestamp (any number of fractional digits) into an
    aware datetime; None and "" give None."""
    if not value:
        return None
    m = _RFC3339.match(value)
    if not m:
        raise ValueError(f"not an RFC 3339 time: {value!r}")
    year, month, day, hour, minute, second = (int(g) for g in m.group(1, 2, 3, 4, 5, 6))
    micro = int((m.group(7) or "0")[:6].ljust(6, "0"))
    if m.group(8):
        tz = timezone.utc
    else:
        offset = timedelta(hours=int(m.group(10)), minutes=int(m.group(11)))
        tz = timezone(-offset if m.group(9) == "-" else offset)
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=tz)


@dataclass
class AuditEvent:
    """One request made to a plane, as recorded in its audit trail (an
    ``audit.k8s.io/v1`` Event; the whole of it is in ``raw``), from
    :meth:`kplane.Plane.audit` or :meth:`kplane.Plane.watch_audit`.

    ``cursor`` is the event's position in the plane's trail: pass it as
    ``since`` to read what came after. ``code`` is the answer's HTTP code;
    ``latency`` is ``stage_timestamp - request_received``."""

    cursor: int
    audit_id: str
    stage: str
    level: str
    verb: str
    request_uri: str
    user: str
    groups: list[str]
    code: int
    resource: str
    subresource: str
    namespace: str
    name: str
    api_group: str
    request_received: datetime | None
    stage_timestamp: datetime | None
    request_object: dict[str, Any] | None
    response_object: dict[str, Any] | None
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "AuditEvent":
        ref = data.get("objectRef") or {}
        user = data.get("user") or {}
        status = data.get("responseStatus") or {}
        annotations = data.get("annotations") or {}
        return cls(
            cursor=int(annotations.get("audit.kplane.dev/cursor") or 0),
            audit_id=data.get("auditID", ""),
            stage=data.get("stage", ""),
            level=data.get("level", ""),
            verb=data.get("verb", ""),
            request_uri=data.get("requestURI", ""),
            user=user.get("username", ""),
            groups=list(user.get("groups") or []),
            code=int(status.get("code") or 0),
            resource=ref.get("resource", ""),
            subresource=ref.get("subresource", ""),
            namespace=ref.get("namespace", ""),
            name=ref.get("name", ""),
            api_group=ref.get("apiGroup", ""),
            request_received=parse_time(data.get("requestReceivedTimestamp")),
            stage_timestamp=parse_time(data.get("stageTimestamp")),
            request_object=data.get("requestObject"),
            response_object=data.get("responseObject"),
            raw=data,
        )

    @property
    def latency(self) -> timedelta | None:
        """How long the request took (to this stage)."""
        if self.request_received is None or self.stage_timestamp is None:
            return None
        return self.stage_timestamp - self.request_received


@dataclass
class SnapshotResource:
    """One resource of a :class:`Snapshot` with its items."""

    group: str
    version: str
    resource: str
    kind: str
    namespaced: bool
    synced: bool
    item_count: int
    resource_version: str
    items: list[dict[str, Any]]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SnapshotResource":
        return cls(
            group=data.get("group", ""),
            version=data.get("version", ""),
            resource=data.get("resource", ""),
            kind=data.get("kind", ""),
            namespaced=bool(data.get("namespaced", False)),
            synced=bool(data.get("synced", False)),
            item_count=int(data.get("itemCount", 0)),
            resource_version=data.get("resourceVersion", ""),
            items=list(data.get("items") or []),
        )

    @property
    def name(self) -> str:
        """The resource as ``resource=`` names it: ``pods``, ``deployments.apps``."""
        return f"{self.resource}.{self.group}" if self.group else self.resource

    def matches(self, name: str) -> bool:
        """Whether ``name`` (``pods``, ``deployments.apps``, ``apps/deployments``,
        ``apps/v1/deployments``) designates this resource."""
        if "/" in name:
            parts = name.split("/")
            if len(parts) == 3:
                return parts[0] == self.group and parts[1] == self.version and parts[2] == self.resource
            return parts[0] == self.group and parts[1] == self.resource
        if "." in name:
            return name == self.name
        return name == self.resource and self.group == ""

    def names(self) -> list[str]:
        """``namespace/name`` (or ``name``) of every item."""
        out = []
        for item in self.items:
            md = item.get("metadata") or {}
            ns = md.get("namespace")
            out.append(f"{ns}/{md.get('name')}" if ns else str(md.get("name")))
        return out


@dataclass
class Snapshot:
    """The state of one plane, read from the server's memory at ``snapshot_time``."""

    cluster: str
    snapshot_time: datetime
    resource_version: str
    live_resources: int
    resources: list[SnapshotResource]
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Snapshot":
        return cls(
            cluster=data.get("cluster", ""),
            snapshot_time=parse_time(data.get("snapshotTime")) or datetime.now(timezone.utc),
            resource_version=data.get("resourceVersion", ""),
            live_resources=int(data.get("liveResources", 0)),
            resources=[SnapshotResource.from_dict(r) for r in data.get("resources") or []],
            raw=data,
        )

    def by_resource(self, name: str) -> SnapshotResource | None:
        """The resource ``name`` (``pods``, ``deployments.apps`` or
        ``apps/deployments``), or None when the snapshot does not hold it."""
        for r in self.resources:
            if r.matches(name):
                return r
        return None

    def total_items(self) -> int:
        """The number of objects in the snapshot, all resources together."""
        return sum(r.item_count for r in self.resources)


@dataclass
class StateEvent:
    """One change of a plane's state, from :meth:`kplane.Plane.watch_state`.

    ``type`` is ``ADDED``, ``MODIFIED``, ``DELETED`` or ``BOOKMARK``; a
    BOOKMARK has no object, only a ``resource_version`` to resume from."""

    type: str
    object: dict[str, Any] | None
    group: str = ""
    resource: str = ""
    resource_version: str = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "StateEvent":
        obj = data.get("object")
        rv = data.get("resourceVersion") or ""
        if not rv and isinstance(obj, dict):
            rv = (obj.get("metadata") or {}).get("resourceVersion", "")
        return cls(
            type=data.get("type", ""),
            object=obj,
            group=data.get("group", ""),
            resource=data.get("resource", ""),
            resource_version=rv,
        )

    @property
    def name(self) -> str:
        """The object's name ("" on a BOOKMARK)."""
        return str(((self.object or {}).get("metadata") or {}).get("name", ""))

    @property
    def namespace(self) -> str:
        """The object's namespace ("" for cluster-scoped objects and BOOKMARKs)."""
        return str(((self.object or {}).get("metadata") or {}).get("namespace", ""))


_LIMIT_FIELDS = (
    ("max_objects", "maxObjects"),
    ("max_bytes", "maxBytes"),
    ("requests_per_second", "requestsPerSecond"),
    ("request_burst", "requestBurst"),
    ("max_watches", "maxWatches"),
)


@dataclass
class PlaneLimits:
    """What a plane may use (``Plane.spec.limits``). ``None`` takes the
    server's default, 0 means no limit. Past ``max_objects``, ``max_bytes``
    or ``max_watches`` a request raises :class:`kplane.ForbiddenError`
    ("exceeded quota"), past ``requests_per_second``
    :class:`kplane.TooManyRequestsError` (the answer carries Retry-After)."""

    max_objects: int | None = None
    max_bytes: int | None = None
    requests_per_second: int | None = None
    request_burst: int | None = None
    max_watches: int | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "PlaneLimits | None":
        if data is None:
            return None
        return cls(**{py: data.get(api) for py, api in _LIMIT_FIELDS})

    def to_dict(self) -> dict[str, Any]:
        """The API form; fields left ``None`` are null (a merge patch removes them)."""
        return {api: getattr(self, py) for py, api in _LIMIT_FIELDS}


@dataclass
class PlaneUsage:
    """What a plane uses (``Plane.status.usage``, written once a change has held
    still for 10 s, or every 30 s while it keeps changing)."""

    objects: int = 0
    bytes: int = 0
    watches: int = 0

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "PlaneUsage":
        data = data or {}
        return cls(
            objects=int(data.get("objects", 0) or 0),
            bytes=int(data.get("bytes", 0) or 0),
            watches=int(data.get("watches", 0) or 0),
        )


@dataclass
class PlaneInfo:
    """A Plane object (``kplane.dev/v1``): one plane and its status."""

    name: str
    phase: str
    object_count: int
    bootstrapped_at: datetime | None
    message: str
    labels: dict[str, str]
    deleting: bool
    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    limits: PlaneLimits | None = None
    usage: PlaneUsage = field(default_factory=PlaneUsage)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PlaneInfo":
        md = data.get("metadata") or {}
        st = data.get("status") or {}
        return cls(
            name=md.get("name", ""),
            phase=st.get("phase", "") or "Pending",
            object_count=int(st.get("objectCount", 0) or 0),
            bootstrapped_at=parse_time(st.get("bootstrappedAt")),
            message=st.get("message", ""),
            labels=dict(md.get("labels") or {}),
            deleting=bool(md.get("deletionTimestamp")),
            raw=data,
            limits=PlaneLimits.from_dict((data.get("spec") or {}).get("limits")),
            usage=PlaneUsage.from_dict(st.get("usage")),
        )

    @property
    def fleet(self) -> str | None:
        """The Fleet this plane belongs to, if any."""
        return self.labels.get("kplane.dev/fleet")


@dataclass
class FleetSpec:
    """What a Fleet asks for: ``replicas`` planes named
    ``<name_prefix><index>`` or the planes ``names`` lists."""

    replicas: int | None = None
    name_prefix: str | None = None
    names: list[str] | None = None
    deletion_policy: str | None = None
    ttl_seconds_after_ready: int | None = None
    #: The plane every member starts as (each member's ``spec.template``).
    template: str | None = None
    #: Every member's ``spec.simulation`` (``faults``, ``nodes``,
    #: ``runDuration``, ``readyDelay``), as the API writes it.
    simulation: dict[str, Any] | None = None
    #: Every member's limits (``spec.limits``).
    limits: "PlaneLimits | None" = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "FleetSpec":
        return cls(
            replicas=data.get("replicas"),
            name_prefix=data.get("namePrefix"),
            names=list(data["names"]) if data.get("names") is not None else None,
            deletion_policy=data.get("deletionPolicy"),
            ttl_seconds_after_ready=data.get("ttlSecondsAfterReady"),
            template=data.get("template"),
            simulation=dict(data["simulation"]) if data.get("simulation") is not None else None,
            limits=PlaneLimits.from_dict(data.get("limits")),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.replicas is not None:
            out["replicas"] = self.replicas
        if self.name_prefix is not None:
            out["namePrefix"] = self.name_prefix
        if self.names is not None:
            out["names"] = list(self.names)
        if self.deletion_policy is not None:
            out["deletionPolicy"] = self.deletion_policy
        if self.ttl_seconds_after_ready is not None:
            out["ttlSecondsAfterReady"] = self.ttl_seconds_after_ready
        if self.template is not None:
            out["template"] = self.template
        if self.simulation is not None:
            out["simulation"] = dict(self.simulation)
        if self.limits is not None:
            out["limits"] = {k: v for k, v in self.limits.to_dict().items() if v is not None}
        return out

    @property
    def size(self) -> int:
        """How many members the spec asks for."""
        return self.replicas if self.replicas is not None else len(self.names or [])


@dataclass
class FleetMember:
    """One member plane of a Fleet: ``phase`` is Pending, Ready or Failed."""

    name: str
    phase: str
    message: str = ""
    last_transition_time: datetime | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "FleetMember":
        return cls(
            name=data.get("name", ""),
            phase=data.get("phase", ""),
            message=data.get("message", ""),
            last_transition_time=parse_time(data.get("lastTransitionTime")),
        )

    @property
    def ready(self) -> bool:
        return self.phase == "Ready"


@dataclass
class Condition:
    """A Kubernetes condition (``metav1.Condition``)."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition_time: datetime | None = None
    observed_generation: int | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Condition":
        return cls(
            type=data.get("type", ""),
            status=data.get("status", ""),
            reason=data.get("reason", ""),
            message=data.get("message", ""),
            last_transition_time=parse_time(data.get("lastTransitionTime")),
            observed_generation=data.get("observedGeneration"),
        )


@dataclass
class FleetStatus:
    """What the server reports about a Fleet."""

    replicas: int = 0
    ready_replicas: int = 0
    observed_generation: int = 0
    members: list[FleetMember] = field(default_factory=list)
    conditions: list[Condition] = field(default_factory=list)
    omitted_members: int = 0
    first_ready_time: datetime | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "FleetStatus":
        return cls(
            replicas=int(data.get("replicas", 0) or 0),
            ready_replicas=int(data.get("readyReplicas", 0) or 0),
            observed_generation=int(data.get("observedGeneration", 0) or 0),
            members=[FleetMember.from_dict(m) for m in data.get("members") or []],
            conditions=[Condition.from_dict(c) for c in data.get("conditions") or []],
            omitted_members=int(data.get("omittedMembers", 0) or 0),
            first_ready_time=parse_time(data.get("firstReadyTime")),
        )

    def condition(self, type_: str) -> Condition | None:
        """The condition of type ``type_``, if reported."""
        for c in self.conditions:
            if c.type == type_:
                return c
        return None
