"""The synchronous client: :class:`Client`, :class:`Plane`, :class:`Fleet`."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, Callable, Iterable, Iterator, Mapping

from . import kubeconfig as _kubeconfig
from ._http import QueryValue, Stream, Transport, as_list
from .errors import ApiError, NotFoundError, Status, TransportError, WaitTimeoutError
from .models import AuditEvent, FleetMember, FleetSpec, FleetStatus, PlaneInfo, PlaneLimits, PlaneUsage, Snapshot, StateEvent

__all__ = ["Client", "Plane", "Fleet", "StateWatch", "AuditWatch", "ROOT"]

#: The id of the root plane, served on the server's bare paths.
ROOT = "root"

_GROUP_VERSION = "kplane.dev/v1"
_PLANES = "/apis/kplane.dev/v1/planes"
_FLEETS = "/apis/kplane.dev/v1/fleets"
_PLANE_ID = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

#: The label that marks a Plane as a member of a Fleet.
FLEET_LABEL = "kplane.dev/fleet"


def _check_plane_id(name: str) -> str:
    if not isinstance(name, str) or len(name) > 63 or not _PLANE_ID.match(name):
        raise ValueError(
            f"{name!r} is not a plane id: a plane id is a DNS-1123 label "
            "(lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63 characters)"
        )
    return name


def _poll(
    check: Callable[[], bool], timeout: float | None, interval: float, what: Callable[[], str]
) -> None:
    """Call ``check`` until it is true; raise WaitTimeoutError after ``timeout`` seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    delay = min(interval, 0.05)
    while True:
        if check():
            return
        if deadline is not None and time.monotonic() >= deadline:
            raise WaitTimeoutError(f"timed out after {timeout:g}s: {what()}")
        pause = delay if deadline is None else max(0.0, min(delay, deadline - time.monotonic()))
        time.sleep(pause)
        delay = min(delay * 2, interval)


class Client:
    """A kplane server.

    One client holds a pool of keep-alive connections and is safe to use
    from several threads. ``token`` is a bearer token (the admin token is in
    ``<data-dir>/admin.kubeconfig``); ``verify_tls=False`` accepts any
    certificate (local development only); ``ca_file`` is the PEM of the
    server's CA (``<data-dir>``'s kubeconfigs embed it). ``timeout`` bounds
    each request, in seconds.
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        verify_tls: bool = True,
        ca_file: str | None = None,
        *,
        ca_data: str | None = None,
        client_cert_file: str | None = None,
        client_key_file: str | None = None,
        timeout: float | None = 30.0,
    ) -> None:
        self._transport = Transport(
            url,
            token=token,
            verify_tls=verify_tls,
            ca_file=ca_file,
            ca_data=ca_data,
            client_cert_file=client_cert_file,
            client_key_file=client_key_file,
            timeout=timeout,
        )
        #: The plane a kubeconfig pointed at, if it pointed at one.
        self.default_plane: str | None = None

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, context: str | None = None, **kwargs: Any) -> "Client":
        """A client for the server of ``context`` (default: the current
        context) in the kubeconfig at ``path`` (default: ``$KUBECONFIG``,
        else ``~/.kube/config``), with its token or client certificate and
        CA. A kubeconfig of a plane (``kplane kubeconfig <id>``) gives a
        client of the server with :attr:`default_plane` set to ``<id>``."""
        creds = _kubeconfig.resolve(path, context)
        client = cls(
            creds.server,
            token=creds.token,
            verify_tls=creds.verify_tls,
            ca_file=creds.ca_file,
            ca_data=creds.ca_data,
            client_cert_file=creds.client_cert_file,
            client_key_file=creds.client_key_file,
            **kwargs,
        )
        client.default_plane = creds.plane
        return client

    # -- plumbing ----------------------------------------------------------

    @property
    def url(self) -> str:
        """The server's URL."""
        return self._transport.url

    def close(self) -> None:
        """Close the client's idle connections."""
        self._transport.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"kplane.Client({self.url!r})"

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, QueryValue] | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """Send any request to the server (``path`` below its URL, e.g.
        ``/clusters/a/control-plane/api/v1/namespaces``) and return the
        decoded JSON answer. Errors raise :class:`kplane.ApiError`."""
        return self._transport.json(method, path, query=query, body=body, headers=headers)

    def cluster_base_url(self, cid: str) -> str:
        """The URL plane ``cid`` serves its Kubernetes API at; give it to any
        Kubernetes client (``kubernetes.client.Configuration.host``)."""
        if cid == ROOT:
            return self.url
        return f"{self.url}/clusters/{_check_plane_id(cid)}/control-plane"

    def openapi_spec(self) -> dict[str, Any]:
        """The contract as the server serves it (``GET /openapi/kplane.json``)."""
        return self.request("GET", "/openapi/kplane.json")

    # -- planes --------------------------------------------------------------

    def plane(self, name: str) -> "Plane":
        """A handle on plane ``name``; no request is made. A plane comes into
        being on its first authorized request (or with :meth:`create_plane`)."""
        return Plane(self, name)

    def create_plane(
        self,
        id: str,
        labels: Mapping[str, str] | None = None,
        template: str | None = None,
        from_plane: str | None = None,
        limits: PlaneLimits | None = None,
    ) -> "Plane":
        """Create the Plane ``id`` and return its handle; the server
        provisions it in the background (see :meth:`Plane.wait_until_ready`).
        With ``template``, the plane starts as that plane's state and stores
        only what it changes (the template is read-only while used; see
        :meth:`Plane.reset`). With ``from_plane``, the plane starts as a
        clone of that plane's state at this moment, over the same template;
        the two change apart afterwards. ``limits`` holds the plane to what
        it may store and request (see :class:`kplane.PlaneLimits`; invalid
        ones raise :class:`kplane.InvalidError`). An existing Plane raises
        :class:`kplane.ConflictError`; an unusable template or source (or
        both given) :class:`kplane.InvalidError`."""
        _check_plane_id(id)
        meta: dict[str, Any] = {"name": id}
        if labels:
            meta["labels"] = dict(labels)
        spec: dict[str, Any] = {}
        if template:
            _check_plane_id(template)
            spec["template"] = template
        if from_plane:
            _check_plane_id(from_plane)
            spec["from"] = from_plane
        if limits is not None:
            spec["limits"] = {k: v for k, v in limits.to_dict().items() if v is not None}
        self.request("POST", _PLANES, body={"apiVersion": _GROUP_VERSION, "kind": "Plane", "metadata": meta, "spec": spec})
        return Plane(self, id)

    def get_plane(self, id: str) -> PlaneInfo:
        """The Plane ``id``; :class:`kplane.NotFoundError` if there is none."""
        return PlaneInfo.from_dict(self.request("GET", f"{_PLANES}/{urllib.parse.quote(id, safe='')}"))

    def list_planes(self, label_selector: str | None = None) -> list[PlaneInfo]:
        """Every Plane (the root plane included), optionally selected by label."""
        return [PlaneInfo.from_dict(p) for p in self._list(_PLANES, label_selector)]

    def delete_plane(self, id: str, wait: bool = False, timeout: float | None = 60.0) -> None:
        """Delete plane ``id`` and everything in it. With ``wait``, return
        once the Plane is gone. An unknown plane raises
        :class:`kplane.NotFoundError`."""
        if id == ROOT:
            raise ValueError("the root plane cannot be deleted")
        self.request("DELETE", f"{_PLANES}/{urllib.parse.quote(id, safe='')}")
        if wait:
            _poll(lambda: not self._exists(f"{_PLANES}/{id}"), timeout, 0.2, lambda: f"plane {id} is still being deleted")

    def _exists(self, path: str) -> bool:
        try:
            self.request("GET", path)
        except NotFoundError:
            return False
        return True

    def _list(self, path: str, label_selector: str | None) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        cont = None
        while True:
            page = self.request("GET", path, query={"labelSelector": label_selector, "limit": 500, "continue": cont})
            items.extend(page.get("items") or [])
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                return items

    # -- fleets --------------------------------------------------------------

    def create_fleet(
        self,
        name: str,
        replicas: int | None = None,
        name_prefix: str | None = None,
        names: Iterable[str] | None = None,
        deletion_policy: str | None = None,
        ttl_seconds_after_ready: int | None = None,
        labels: Mapping[str, str] | None = None,
        template: str | None = None,
        simulation: Mapping[str, Any] | None = None,
        limits: PlaneLimits | None = None,
    ) -> "Fleet":
        """Create a Fleet: ``replicas`` planes named ``<name_prefix><index>``
        (four-digit index; the prefix defaults to ``<name>-``), or the planes
        ``names`` lists. ``deletion_policy`` is ``"Retain"`` (default: member
        planes outlive the Fleet) or ``"Delete"``. With ``template`` every
        member starts as that plane's state and stores only what it changes.
        ``simulation`` is every member's simulated cluster, as a Plane's
        ``spec.simulation`` holds it (``{"faults": [...], "nodes": {"count":
        1}, "runDuration": "200ms", "readyDelay": "1s"}``); see
        :meth:`Fleet.set_simulation`. ``limits`` holds every member to what
        it may store and request (see :class:`kplane.PlaneLimits`)."""
        spec = _fleet_spec(replicas, name_prefix, names, deletion_policy, ttl_seconds_after_ready, template, simulation)
        spec.limits = limits
        meta: dict[str, Any] = {"name": name}
        if labels:
            meta["labels"] = dict(labels)
        obj = self.request(
            "POST", _FLEETS, body={"apiVersion": _GROUP_VERSION, "kind": "Fleet", "metadata": meta, "spec": spec.to_dict()}
        )
        return Fleet(self, obj)

    def get_fleet(self, name: str) -> "Fleet":
        """The Fleet ``name``; :class:`kplane.NotFoundError` if there is none."""
        return Fleet(self, self.request("GET", f"{_FLEETS}/{urllib.parse.quote(name, safe='')}"))

    def list_fleets(self, label_selector: str | None = None) -> list["Fleet"]:
        """Every Fleet."""
        return [Fleet(self, f) for f in self._list(_FLEETS, label_selector)]

    @contextmanager
    def ephemeral_fleet(
        self,
        name: str,
        replicas: int | None = None,
        name_prefix: str | None = None,
        names: Iterable[str] | None = None,
        deletion_policy: str | None = "Delete",
        ttl_seconds_after_ready: int | None = None,
        wait_deleted: bool = False,
        delete_timeout: float | None = 120.0,
        template: str | None = None,
        simulation: Mapping[str, Any] | None = None,
        limits: PlaneLimits | None = None,
    ) -> Iterator["Fleet"]:
        """Create a Fleet for the ``with`` block and delete it on exit, also
        when the block raises. Unlike :meth:`create_fleet`, members are
        deleted with the Fleet by default (``deletion_policy="Delete"``);
        pass ``"Retain"`` to keep them. ``wait_deleted`` waits until the
        Fleet (and so its members' deletion) is finished."""
        fleet = self.create_fleet(
            name,
            replicas=replicas,
            name_prefix=name_prefix,
            names=names,
            deletion_policy=deletion_policy,
            ttl_seconds_after_ready=ttl_seconds_after_ready,
            template=template,
            simulation=simulation,
            limits=limits,
        )
        try:
            yield fleet
        finally:
            try:
                fleet.delete(wait=wait_deleted, timeout=delete_timeout)
            except NotFoundError:
                pass


def _fleet_spec(
    replicas: int | None,
    name_prefix: str | None,
    names: Iterable[str] | None,
    deletion_policy: str | None,
    ttl_seconds_after_ready: int | None,
    template: str | None = None,
    simulation: Mapping[str, Any] | None = None,
) -> FleetSpec:
    listed = list(names) if names is not None else None
    if isinstance(names, str):
        raise ValueError("names must be a list of plane ids, not a string")
    if (replicas is None) == (listed is None):
        raise ValueError("give exactly one of replicas (with an optional name_prefix) and names")
    if name_prefix is not None and replicas is None:
        raise ValueError("name_prefix names the members of replicas; names are used as they are")
    if deletion_policy not in (None, "Retain", "Delete"):
        raise ValueError(f"deletion_policy {deletion_policy!r}: want 'Retain' or 'Delete'")
    if template is not None:
        _check_plane_id(template)
    return FleetSpec(
        replicas=replicas,
        name_prefix=name_prefix,
        names=listed,
        deletion_policy=deletion_policy,
        ttl_seconds_after_ready=ttl_seconds_after_ready,
        template=template,
        simulation=_simulation(simulation),
    )


def _simulation(simulation: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if simulation is None:
        return None
    if not isinstance(simulation, Mapping):
        raise ValueError("simulation must be a mapping such as {'runDuration': '200ms'}")
    return dict(simulation)


class Plane:
    """A handle on one plane; cheap to make, no request on construction."""

    def __init__(self, client: Client, name: str) -> None:
        if name != ROOT:
            _check_plane_id(name)
        self.client = client
        self.name = name
        self._prefix = "" if name == ROOT else f"/clusters/{name}/control-plane"

    def __repr__(self) -> str:
        return f"kplane.Plane({self.name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Plane) and other.client is self.client and other.name == self.name

    def __hash__(self) -> int:
        return hash((id(self.client), self.name))

    @property
    def url(self) -> str:
        """The URL the plane serves its Kubernetes API at."""
        return self.client.cluster_base_url(self.name)

    def path(self, rest: str) -> str:
        """``rest`` (``/api/v1/...``) as a path of this plane on the server."""
        return self._prefix + rest

    def set_faults(self, faults: Iterable[Mapping[str, Any]]) -> None:
        """Set the faults the workload simulation plays in this plane (on its
        Plane in the root plane, out of the plane's own users' reach),
        replacing any set before; e.g. ``[{"type": "CrashLoopBackOff",
        "match": {"image": "*:broken"}}]``. Types: ``CrashLoopBackOff``,
        ``OOMKilled``, ``ImagePullBackOff``, ``NotReady``; ``match`` takes
        ``image`` (a glob), ``container``, ``namespace``, ``podLabels``. An
        empty list lifts them all. Needs the admin (root) credential; an
        invalid fault raises :class:`kplane.InvalidError`."""
        self._patch_simulation({"faults": [dict(f) for f in faults]})

    def set_nodes(self, nodes: Mapping[str, Any]) -> None:
        """Set the shape of this plane's simulated nodes (``count``, ``cpu``,
        ``memory``, ``pods``, ``extendedResources`` such as
        ``{"nvidia.com/gpu": 8}``, ``labels``, ``taints``), read when the
        nodes are made: set it before the plane's first Pod."""
        self._patch_simulation({"nodes": dict(nodes)})

    def set_timings(
        self,
        run_duration: str | float | timedelta | None = None,
        ready_delay: str | float | timedelta | None = None,
    ) -> None:
        """Replace how long this plane's simulated Pods take (``None``: the
        server's default): ``run_duration``, how long a run-to-completion Pod
        (a Job's) runs before it succeeds; ``ready_delay``, how long a Pod
        runs before its containers are ready (a readiness probe's time to
        pass; the server's default is 0, ready at once). Each is a Go
        duration such as ``"200ms"``, seconds, or a ``timedelta``; a change
        applies to running Pods too, and a Pod's ``kplane.dev/run-duration``
        or ``kplane.dev/ready-delay`` annotation still wins. Needs the admin
        (root) credential; a negative or malformed duration raises
        :class:`kplane.InvalidError`."""
        self._patch_simulation({"runDuration": _duration(run_duration), "readyDelay": _duration(ready_delay)})

    def set_simulation(self, simulation: Mapping[str, Any] | None) -> None:
        """Replace this plane's whole simulated cluster (``None``: the
        server's defaults), as its Plane's ``spec.simulation`` holds it:
        ``{"faults": [...], "nodes": {...}, "runDuration": "200ms",
        "readyDelay": "1s"}``; what it leaves out is no longer set, unlike
        :meth:`set_faults`, :meth:`set_nodes` and :meth:`set_timings`, which
        change their part only. Needs the admin (root) credential; an
        invalid one raises :class:`kplane.InvalidError`."""
        path = f"{_PLANES}/{urllib.parse.quote(self.name, safe='')}"
        if simulation is None:
            self._patch_simulation(None)
            return
        # A JSON patch replaces it whole: a merge would keep the keys left out.
        body = [{"op": "add", "path": "/spec/simulation", "value": _simulation(simulation)}]
        self.client.request(
            "PATCH", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json-patch+json"}
        )

    def set_limits(self, limits: PlaneLimits | None) -> None:
        """Replace this plane's limits (``None``: the server's defaults);
        they hold from the plane's next request. Needs the admin (root)
        credential; invalid limits raise :class:`kplane.InvalidError`."""
        self.client.request(
            "PATCH",
            f"{_PLANES}/{urllib.parse.quote(self.name, safe='')}",
            body={"spec": {"limits": limits.to_dict() if limits is not None else None}},
            headers={"Content-Type": "application/merge-patch+json"},
        )

    def usage(self) -> PlaneUsage:
        """What the plane uses, as its Plane's status last reported it."""
        return self.client.get_plane(self.name).usage

    def _patch_simulation(self, simulation: dict[str, Any] | None) -> None:
        self.client.request(
            "PATCH",
            f"{_PLANES}/{urllib.parse.quote(self.name, safe='')}",
            body={"spec": {"simulation": simulation}},
            headers={"Content-Type": "application/merge-patch+json"},
        )

    def reset(self) -> None:
        """Return the plane to where it started: its template's state, or
        the empty bootstrapped plane. Returns once the plane serves it;
        requests made meanwhile wait, open watches end. A template other
        planes are made from raises :class:`kplane.ForbiddenError`."""
        self.client.request("POST", self.path("/reset"))

    def state(
        self,
        resource: str | Iterable[str] | None = None,
        include_empty: bool = False,
        warm: bool = False,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> Snapshot:
        """Everything in the plane, in one request read from the server's
        memory. ``resource`` selects resources (``"pods"``,
        ``"deployments.apps"``, ``"apps/deployments"``, or a list);
        ``include_empty`` keeps resources without objects; ``warm`` makes
        the server build and sync caches it has not built yet (custom
        resources) before answering. An unknown resource raises
        :class:`kplane.BadRequestError`."""
        query: dict[str, QueryValue] = {
            "resource": as_list(resource),
            "includeEmpty": include_empty or None,
            "warm": warm or None,
            "namespace": namespace,
            "labelSelector": label_selector,
        }
        return Snapshot.from_dict(self.client.request("GET", self.path("/snapshot"), query=query))

    def watch_state(
        self,
        resource_version: str | None = None,
        resource: str | Iterable[str] | None = None,
        namespace: str | None = None,
        label_selector: str | None = None,
        timeout_seconds: int | None = None,
        read_timeout: float | None = None,
    ) -> "StateWatch":
        """Stream the changes of the plane after ``resource_version`` (the
        ``resource_version`` of a :class:`Snapshot` or of a BOOKMARK event):
        iterate the returned :class:`StateWatch` for :class:`StateEvent`
        values. Without ``resource_version`` the stream starts with the
        current state as ADDED events. A version the server no longer
        holds raises :class:`kplane.GoneError` (take a new snapshot).
        ``timeout_seconds`` ends the stream on the server's side,
        ``read_timeout`` bounds each wait for the next line."""
        query: dict[str, QueryValue] = {
            "watch": True,
            "resourceVersion": resource_version or None,
            "resource": as_list(resource),
            "namespace": namespace,
            "labelSelector": label_selector,
            "timeoutSeconds": timeout_seconds,
        }
        stream = self.client._transport.stream("GET", self.path("/snapshot"), query=query, read_timeout=read_timeout)
        return StateWatch(stream, self.name, resource_version or "")

    def audit(self, since: int | str | datetime | None = None, limit: int | None = None) -> list[AuditEvent]:
        """The plane's audit trail: every request made to it that the server
        still holds (its newest ``--audit-buffer-events``), oldest first.
        ``since`` is a cursor (an :attr:`AuditEvent.cursor`: only what came
        after it) or a time (only what was recorded from then on); ``limit``
        caps the count. Needs ``get`` on ``audit`` in API group
        ``kplane.dev`` in the plane (:class:`kplane.ForbiddenError`
        otherwise); a cursor the trail no longer holds raises
        :class:`kplane.GoneError`. Reading is recorded in the trail too."""
        query: dict[str, QueryValue] = {"since": _since(since), "limit": limit}
        resp = self.client._transport.request("GET", self.path("/audit"), query=query)
        return [AuditEvent.from_dict(json.loads(line)) for line in resp.body.splitlines() if line.strip()]

    def watch_audit(
        self, since: int | str | datetime | None = None, read_timeout: float | None = None
    ) -> "AuditWatch":
        """Follow the plane's audit trail: iterate the returned
        :class:`AuditWatch` for :class:`AuditEvent` values, first what the
        trail holds after ``since`` (see :meth:`audit`), then every new
        request as it ends. Needs ``watch`` on ``audit`` in ``kplane.dev``.
        ``read_timeout`` bounds each wait for the next event."""
        query: dict[str, QueryValue] = {"watch": True, "since": _since(since)}
        stream = self.client._transport.stream("GET", self.path("/audit"), query=query, read_timeout=read_timeout)
        return AuditWatch(stream, self.name)

    def set_audit_level(self, level: str) -> None:
        """Set how the plane's requests are recorded: ``None``, ``Metadata``
        (the default), ``Request`` (plus the body of every write) or
        ``RequestResponse`` (plus the answer of every write). Needs the admin
        (root) credential; another value raises :class:`kplane.InvalidError`."""
        self.client.request(
            "PATCH",
            f"{_PLANES}/{urllib.parse.quote(self.name, safe='')}",
            body={"spec": {"audit": {"level": level}}},
            headers={"Content-Type": "application/merge-patch+json"},
        )

    def is_ready(self) -> bool:
        """Whether the plane exists and is ready (its ``/readyz`` answers
        ok). False for a plane that does not exist or is being deleted;
        never creates a plane."""
        try:
            self.client._transport.request("GET", self.path("/readyz"), headers={"Accept": "text/plain"})
        except NotFoundError:
            return False
        except ApiError as e:
            if e.code == 503:
                return False
            raise
        return True

    def wait_until_ready(self, timeout: float | None = 60.0, interval: float = 0.2) -> "Plane":
        """Block until :meth:`is_ready`; :class:`kplane.WaitTimeoutError` after ``timeout`` seconds."""
        _poll(self.is_ready, timeout, interval, lambda: f"plane {self.name} is not ready")
        return self

    def info(self) -> PlaneInfo:
        """The plane's Plane object (phase, object count, labels)."""
        return self.client.get_plane(self.name)

    def delete(self, wait: bool = False, timeout: float | None = 60.0) -> None:
        """Delete the plane and everything in it (see :meth:`Client.delete_plane`)."""
        self.client.delete_plane(self.name, wait=wait, timeout=timeout)


class StateWatch:
    """A running delta stream: iterate it for :class:`StateEvent` values,
    close it (or use ``with``) when done. :attr:`resource_version` is where
    a new stream would resume without missing anything."""

    def __init__(self, stream: Stream, plane: str, resource_version: str) -> None:
        self._stream = stream
        self._closed = False
        self._lock = threading.Lock()
        self.plane = plane
        self.resource_version = resource_version

    def __iter__(self) -> Iterator[StateEvent]:
        return self

    def __next__(self) -> StateEvent:
        while True:
            if self._closed:
                raise StopIteration
            line = self._stream.readline()
            if not line:
                self.close()
                raise StopIteration
            line = line.strip()
            if not line:
                continue
            try:
                data = json.loads(line)
            except ValueError as e:
                self.close()
                raise TransportError(f"delta stream of plane {self.plane}: not JSON: {line[:200]!r}") from e
            if data.get("type") == "ERROR":
                self.close()
                status = Status.from_dict(data.get("object") or {}, 500)
                raise ApiError.from_status(status, "GET", f"delta stream of plane {self.plane}")
            event = StateEvent.from_dict(data)
            if event.type == "BOOKMARK" and event.resource_version:
                self.resource_version = event.resource_version
            return event

    def close(self) -> None:
        """End the stream and release its connection."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stream.close()

    def __enter__(self) -> "StateWatch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _duration(d: str | float | timedelta | None) -> str | None:
    """A duration as the API takes it (a Go duration string); None stays
    None, which a merge patch removes."""
    if d is None or isinstance(d, str):
        return d
    seconds = d.total_seconds() if isinstance(d, timedelta) else float(d)
    return f"{round(seconds * 1000)}ms"


def _since(since: int | str | datetime | None) -> str | None:
    if since is None or since == "":
        return None
    if isinstance(since, datetime):
        if since.tzinfo is None:
            raise ValueError("since: a datetime with a time zone")
        return since.isoformat()
    return str(since)


class AuditWatch:
    """A followed audit trail: iterate it for :class:`AuditEvent` values,
    close it (or use ``with``) when done. :attr:`cursor` is the last event's
    cursor: ``watch_audit(since=cursor)`` resumes without a gap."""

    def __init__(self, stream: Stream, plane: str) -> None:
        self._stream = stream
        self._closed = False
        self._lock = threading.Lock()
        self.plane = plane
        self.cursor = 0

    def __iter__(self) -> Iterator[AuditEvent]:
        return self

    def __next__(self) -> AuditEvent:
        while True:
            if self._closed:
                raise StopIteration
            line = self._stream.readline()
            if not line:
                self.close()
                raise StopIteration
            line = line.strip()
            if not line:
                continue
            try:
                event = AuditEvent.from_dict(json.loads(line))
            except ValueError as e:
                self.close()
                raise TransportError(f"audit trail of plane {self.plane}: not an event: {line[:200]!r}") from e
            self.cursor = event.cursor
            return event

    def close(self) -> None:
        """End the stream and release its connection."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stream.close()

    def __enter__(self) -> "AuditWatch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Fleet:
    """A Fleet as last read from the server; :meth:`refresh` reads it again."""

    def __init__(self, client: Client, obj: dict[str, Any]) -> None:
        self.client = client
        self._set(obj)

    def _set(self, obj: dict[str, Any]) -> None:
        self.raw = obj
        md = obj.get("metadata") or {}
        self.name: str = md.get("name", "")
        self.generation: int = int(md.get("generation", 0) or 0)
        self.labels: dict[str, str] = dict(md.get("labels") or {})
        self.deleting: bool = bool(md.get("deletionTimestamp"))
        self.spec: FleetSpec = FleetSpec.from_dict(obj.get("spec") or {})
        self.status: FleetStatus = FleetStatus.from_dict(obj.get("status") or {})

    def __repr__(self) -> str:
        return f"kplane.Fleet({self.name!r}, ready={self.status.ready_replicas}/{self.spec.size})"

    @property
    def _path(self) -> str:
        return f"{_FLEETS}/{urllib.parse.quote(self.name, safe='')}"

    @property
    def members(self) -> list[FleetMember]:
        """The members the server reports, in member order (large Fleets
        may omit Ready members: see ``status.omitted_members``)."""
        return list(self.status.members)

    @property
    def is_ready(self) -> bool:
        """Whether the server has seen the current spec and every member is Ready."""
        st = self.status
        if self.deleting or st.observed_generation < self.generation:
            return False
        if st.replicas != self.spec.size or st.ready_replicas != st.replicas:
            return False
        cond = st.condition("Ready")
        return cond is None or cond.status == "True"

    def refresh(self) -> "Fleet":
        """Read the Fleet again; returns self."""
        self._set(self.client.request("GET", self._path))
        return self

    def wait_until_ready(self, timeout: float | None = 120.0, interval: float = 0.25) -> "Fleet":
        """Block until every member is Ready; :class:`kplane.WaitTimeoutError`
        (saying which members are not) after ``timeout`` seconds."""

        def check() -> bool:
            self.refresh()
            return self.is_ready

        _poll(check, timeout, interval, self._progress)
        return self

    def _progress(self) -> str:
        st = self.status
        pending = [m for m in st.members if not m.ready]
        detail = ", ".join(f"{m.name} {m.phase}" + (f" ({m.message})" if m.message else "") for m in pending[:5])
        more = f" and {len(pending) - 5} more" if len(pending) > 5 else ""
        return f"fleet {self.name}: {st.ready_replicas}/{self.spec.size} members ready" + (
            f"; not ready: {detail}{more}" if detail else ""
        )

    def planes(self) -> list[Plane]:
        """A handle on every member plane, in member order."""
        if self.status.omitted_members or len(self.status.members) < self.status.replicas:
            infos = self.client.list_planes(label_selector=f"{FLEET_LABEL}={self.name}")
            return [Plane(self.client, p.name) for p in sorted(infos, key=lambda p: p.name)]
        return [Plane(self.client, m.name) for m in self.status.members]

    def set_simulation(self, simulation: Mapping[str, Any] | None) -> "Fleet":
        """Replace every member's simulated cluster (``None``: the server's
        defaults again), as a Plane's ``spec.simulation`` holds it. Members
        are given it within moments, new members at their creation; a change
        made to one member's own simulation meanwhile stays until the
        Fleet's next one. Needs the admin (root) credential; an invalid one
        raises :class:`kplane.InvalidError`. Returns self, refreshed."""
        if simulation is None:
            body, content_type = {"spec": {"simulation": None}}, "application/merge-patch+json"
        else:
            # A JSON patch replaces it whole: a merge would keep the keys left out.
            body = [{"op": "add", "path": "/spec/simulation", "value": _simulation(simulation)}]
            content_type = "application/json-patch+json"
        obj = self.client.request(
            "PATCH", self._path, body=json.dumps(body).encode(), headers={"Content-Type": content_type}
        )
        self._set(obj)
        return self

    def scale(self, replicas: int) -> "Fleet":
        """Change ``spec.replicas``; returns self, refreshed."""
        obj = self.client.request(
            "PATCH",
            self._path,
            body=json.dumps({"spec": {"replicas": replicas}}).encode(),
            headers={"Content-Type": "application/merge-patch+json"},
        )
        self._set(obj)
        return self

    def delete(self, wait: bool = False, timeout: float | None = 120.0) -> None:
        """Delete the Fleet; its members are retained or deleted as
        ``spec.deletion_policy`` says. With ``wait``, return once the Fleet
        is gone (its members released or deleted)."""
        self.client.request("DELETE", self._path)
        if wait:
            _poll(lambda: not self.client._exists(self._path), timeout, 0.2, lambda: f"fleet {self.name} is still being deleted")
