"""The SDK on asyncio: :class:`AsyncClient`, with the surface of
:class:`kplane.Client`, every call a coroutine.

Requests run on a thread pool owned by the client (the standard library
has no asyncio HTTP client); ``max_workers`` bounds how many are in flight
at once, and the connections behind them are kept alive and reused. The
event loop is never blocked.
"""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, AsyncIterator, Callable, Generic, Iterable, Mapping, TypeVar

from ._http import QueryValue
from .client import AuditWatch, Client, Fleet, Plane, StateWatch
from .errors import NotFoundError
from .models import AuditEvent, FleetMember, FleetSpec, FleetStatus, PlaneInfo, PlaneLimits, PlaneUsage, Snapshot, StateEvent

__all__ = ["AsyncClient", "AsyncPlane", "AsyncFleet", "AsyncStateWatch", "AsyncAuditWatch"]

T = TypeVar("T")
S = TypeVar("S")
E = TypeVar("E")


class AsyncClient:
    """A kplane server, on asyncio. Arguments are those of
    :class:`kplane.Client`; ``max_workers`` is the number of requests in
    flight at once."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        verify_tls: bool = True,
        ca_file: str | None = None,
        *,
        max_workers: int = 16,
        **kwargs: Any,
    ) -> None:
        self._init(Client(url, token, verify_tls, ca_file, **kwargs), max_workers)

    def _init(self, sync: Client, max_workers: int) -> None:
        self.sync = sync
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="kplane-aio")

    @classmethod
    def from_kubeconfig(
        cls, path: str | None = None, context: str | None = None, *, max_workers: int = 16, **kwargs: Any
    ) -> "AsyncClient":
        """See :meth:`kplane.Client.from_kubeconfig`."""
        client = cls.__new__(cls)
        client._init(Client.from_kubeconfig(path, context, **kwargs), max_workers)
        return client

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    @property
    def url(self) -> str:
        return self.sync.url

    async def reset(self) -> None:
        """See :meth:`kplane.Plane.reset`."""
        await self.client._run(self.sync.reset)

    @property
    def default_plane(self) -> str | None:
        return self.sync.default_plane

    async def close(self) -> None:
        """Close connections and stop the client's threads."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.sync.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"kplane.aio.AsyncClient({self.url!r})"

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, QueryValue] | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """See :meth:`kplane.Client.request`."""
        return await self._run(self.sync.request, method, path, query=query, body=body, headers=headers)

    def cluster_base_url(self, cid: str) -> str:
        """See :meth:`kplane.Client.cluster_base_url`."""
        return self.sync.cluster_base_url(cid)

    async def openapi_spec(self) -> dict[str, Any]:
        return await self._run(self.sync.openapi_spec)

    def plane(self, name: str) -> "AsyncPlane":
        """A handle on plane ``name``; no request is made."""
        return AsyncPlane(self, Plane(self.sync, name))

    async def create_plane(
        self,
        id: str,
        labels: Mapping[str, str] | None = None,
        template: str | None = None,
        from_plane: str | None = None,
        limits: PlaneLimits | None = None,
    ) -> "AsyncPlane":
        """See :meth:`kplane.Client.create_plane`."""
        return AsyncPlane(self, await self._run(self.sync.create_plane, id, labels, template, from_plane, limits))

    async def get_plane(self, id: str) -> PlaneInfo:
        return await self._run(self.sync.get_plane, id)

    async def list_planes(self, label_selector: str | None = None) -> list[PlaneInfo]:
        return await self._run(self.sync.list_planes, label_selector)

    async def delete_plane(self, id: str, wait: bool = False, timeout: float | None = 60.0) -> None:
        """See :meth:`kplane.Client.delete_plane`."""
        await self._run(self.sync.delete_plane, id)
        if wait:
            await self._wait_gone(f"/apis/kplane.dev/v1/planes/{id}", timeout, f"plane {id} is still being deleted")

    async def _wait_gone(self, path: str, timeout: float | None, what: str) -> None:
        await _poll(lambda: self._gone(path), timeout, 0.2, lambda: what)

    async def _gone(self, path: str) -> bool:
        try:
            await self._run(self.sync.request, "GET", path)
        except NotFoundError:
            return True
        return False

    async def create_fleet(
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
    ) -> "AsyncFleet":
        """See :meth:`kplane.Client.create_fleet`."""
        fleet = await self._run(
            self.sync.create_fleet,
            name,
            replicas=replicas,
            name_prefix=name_prefix,
            names=list(names) if names is not None else None,
            deletion_policy=deletion_policy,
            ttl_seconds_after_ready=ttl_seconds_after_ready,
            labels=labels,
            template=template,
            simulation=simulation,
            limits=limits,
        )
        return AsyncFleet(self, fleet)

    async def get_fleet(self, name: str) -> "AsyncFleet":
        return AsyncFleet(self, await self._run(self.sync.get_fleet, name))

    async def list_fleets(self, label_selector: str | None = None) -> list["AsyncFleet"]:
        return [AsyncFleet(self, f) for f in await self._run(self.sync.list_fleets, label_selector)]

    @asynccontextmanager
    async def ephemeral_fleet(
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
    ) -> AsyncIterator["AsyncFleet"]:
        """See :meth:`kplane.Client.ephemeral_fleet`: deleted on exit, also
        when the block raises or is cancelled."""
        fleet = await self.create_fleet(
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
                # Shielded: a cancelled block still deletes its Fleet.
                await asyncio.shield(fleet.delete(wait=wait_deleted, timeout=delete_timeout))
            except NotFoundError:
                pass


async def _poll(
    check: Callable[[], Any], timeout: float | None, interval: float, what: Callable[[], str]
) -> None:
    from .errors import WaitTimeoutError

    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    delay = min(interval, 0.05)
    while True:
        if await check():
            return
        if deadline is not None and loop.time() >= deadline:
            raise WaitTimeoutError(f"timed out after {timeout:g}s: {what()}")
        pause = delay if deadline is None else max(0.0, min(delay, deadline - loop.time()))
        await asyncio.sleep(pause)
        delay = min(delay * 2, interval)


class AsyncPlane:
    """A handle on one plane (see :class:`kplane.Plane`)."""

    def __init__(self, client: AsyncClient, plane: Plane) -> None:
        self.client = client
        self.sync = plane
        self.name = plane.name

    def __repr__(self) -> str:
        return f"kplane.aio.AsyncPlane({self.name!r})"

    @property
    def url(self) -> str:
        return self.sync.url

    async def set_faults(self, faults: Iterable[Mapping[str, Any]]) -> None:
        """See :meth:`kplane.Plane.set_faults`."""
        await self.client._run(self.sync.set_faults, [dict(f) for f in faults])

    async def set_limits(self, limits: PlaneLimits | None) -> None:
        """See :meth:`kplane.Plane.set_limits`."""
        await self.client._run(self.sync.set_limits, limits)

    async def usage(self) -> PlaneUsage:
        """See :meth:`kplane.Plane.usage`."""
        return await self.client._run(self.sync.usage)

    async def set_nodes(self, nodes: Mapping[str, Any]) -> None:
        """See :meth:`kplane.Plane.set_nodes`."""
        await self.client._run(self.sync.set_nodes, dict(nodes))

    async def set_timings(
        self,
        run_duration: str | float | timedelta | None = None,
        ready_delay: str | float | timedelta | None = None,
    ) -> None:
        """See :meth:`kplane.Plane.set_timings`."""
        await self.client._run(self.sync.set_timings, run_duration, ready_delay)

    async def set_simulation(self, simulation: Mapping[str, Any] | None) -> None:
        """See :meth:`kplane.Plane.set_simulation`."""
        await self.client._run(self.sync.set_simulation, simulation)

    async def state(
        self,
        resource: str | Iterable[str] | None = None,
        include_empty: bool = False,
        warm: bool = False,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> Snapshot:
        """See :meth:`kplane.Plane.state`."""
        return await self.client._run(
            self.sync.state,
            resource=list(resource) if resource is not None and not isinstance(resource, str) else resource,
            include_empty=include_empty,
            warm=warm,
            namespace=namespace,
            label_selector=label_selector,
        )

    async def watch_state(
        self,
        resource_version: str | None = None,
        resource: str | Iterable[str] | None = None,
        namespace: str | None = None,
        label_selector: str | None = None,
        timeout_seconds: int | None = None,
        read_timeout: float | None = None,
    ) -> "AsyncStateWatch":
        """See :meth:`kplane.Plane.watch_state`; iterate with ``async for``."""
        watch = await self.client._run(
            self.sync.watch_state,
            resource_version=resource_version,
            resource=list(resource) if resource is not None and not isinstance(resource, str) else resource,
            namespace=namespace,
            label_selector=label_selector,
            timeout_seconds=timeout_seconds,
            read_timeout=read_timeout,
        )
        return AsyncStateWatch(self.client, watch)

    async def audit(self, since: Any = None, limit: int | None = None) -> list[AuditEvent]:
        """See :meth:`kplane.Plane.audit`."""
        return await self.client._run(self.sync.audit, since=since, limit=limit)

    async def watch_audit(self, since: Any = None, read_timeout: float | None = None) -> "AsyncAuditWatch":
        """See :meth:`kplane.Plane.watch_audit`; iterate with ``async for``."""
        watch = await self.client._run(self.sync.watch_audit, since=since, read_timeout=read_timeout)
        return AsyncAuditWatch(self.client, watch)

    async def set_audit_level(self, level: str) -> None:
        """See :meth:`kplane.Plane.set_audit_level`."""
        await self.client._run(self.sync.set_audit_level, level)

    async def is_ready(self) -> bool:
        return await self.client._run(self.sync.is_ready)

    async def wait_until_ready(self, timeout: float | None = 60.0, interval: float = 0.2) -> "AsyncPlane":
        await _poll(self.is_ready, timeout, interval, lambda: f"plane {self.name} is not ready")
        return self

    async def info(self) -> PlaneInfo:
        return await self.client._run(self.sync.info)

    async def delete(self, wait: bool = False, timeout: float | None = 60.0) -> None:
        await self.client.delete_plane(self.name, wait=wait, timeout=timeout)


class _AsyncStream(Generic[S, E]):
    """A sync stream (a delta stream or a followed trail) read on the
    client's threads: ``async for`` yields its items."""

    def __init__(self, client: AsyncClient, stream: S) -> None:
        self._client = client
        self.sync = stream

    def __aiter__(self) -> "_AsyncStream[S, E]":
        return self

    async def __anext__(self) -> E:
        item = await self._client._run(_next_or_none, self.sync)
        if item is None:
            raise StopAsyncIteration
        return item

    async def close(self) -> None:
        # Closing the socket also wakes a read blocked in another thread.
        self.sync.close()  # type: ignore[attr-defined]

    async def __aenter__(self) -> "_AsyncStream[S, E]":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncStateWatch(_AsyncStream[StateWatch, StateEvent]):
    """A running delta stream (see :class:`kplane.StateWatch`); ``async for``
    yields :class:`kplane.StateEvent` values."""

    @property
    def resource_version(self) -> str:
        return self.sync.resource_version


class AsyncAuditWatch(_AsyncStream[AuditWatch, AuditEvent]):
    """A followed audit trail (see :class:`kplane.AuditWatch`); ``async for``
    yields :class:`kplane.AuditEvent` values."""

    @property
    def cursor(self) -> int:
        return self.sync.cursor


def _next_or_none(watch: Any) -> Any:
    # StopIteration cannot cross a Future; None marks the end.
    return next(watch, None)


class AsyncFleet:
    """A Fleet (see :class:`kplane.Fleet`)."""

    def __init__(self, client: AsyncClient, fleet: Fleet) -> None:
        self.client = client
        self.sync = fleet

    def __repr__(self) -> str:
        return f"kplane.aio.AsyncFleet({self.name!r}, ready={self.status.ready_replicas}/{self.spec.size})"

    @property
    def name(self) -> str:
        return self.sync.name

    @property
    def spec(self) -> FleetSpec:
        return self.sync.spec

    @property
    def status(self) -> FleetStatus:
        return self.sync.status

    @property
    def members(self) -> list[FleetMember]:
        return self.sync.members

    @property
    def is_ready(self) -> bool:
        return self.sync.is_ready

    async def refresh(self) -> "AsyncFleet":
        await self.client._run(self.sync.refresh)
        return self

    async def wait_until_ready(self, timeout: float | None = 120.0, interval: float = 0.25) -> "AsyncFleet":
        """See :meth:`kplane.Fleet.wait_until_ready`."""

        async def check() -> bool:
            await self.refresh()
            return self.sync.is_ready

        await _poll(check, timeout, interval, self.sync._progress)
        return self

    async def planes(self) -> list[AsyncPlane]:
        return [AsyncPlane(self.client, p) for p in await self.client._run(self.sync.planes)]

    async def set_simulation(self, simulation: Mapping[str, Any] | None) -> "AsyncFleet":
        """See :meth:`kplane.Fleet.set_simulation`."""
        await self.client._run(self.sync.set_simulation, simulation)
        return self

    async def scale(self, replicas: int) -> "AsyncFleet":
        await self.client._run(self.sync.scale, replicas)
        return self

    async def delete(self, wait: bool = False, timeout: float | None = 120.0) -> None:
        """See :meth:`kplane.Fleet.delete`."""
        await self.client._run(self.sync.delete)
        if wait:
            await self.client._wait_gone(self.sync._path, timeout, f"fleet {self.name} is still being deleted")
