"""kplane.aio.AsyncClient against a real kplane server."""

from __future__ import annotations

import asyncio
import unittest

from helpers import ServerTestCase, create_configmap, eventually, unique
from server import start_for_module

import kplane
import kplane.aio

SERVER = None


def setUpModule() -> None:
    global SERVER
    SERVER = start_for_module(unittest.addModuleCleanup)
    ServerTestCase.server = SERVER
    ServerTestCase.client = kplane.Client(SERVER.url, token=SERVER.token, ca_file=SERVER.ca_file)
    unittest.addModuleCleanup(ServerTestCase.client.close)


class AsyncClientTest(ServerTestCase, unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        # Decoding a large answer in a worker thread holds the GIL for a
        # moment; the debug loop of these tests would report it as slow.
        asyncio.get_running_loop().slow_callback_duration = 2.0
        self.aclient = kplane.aio.AsyncClient(SERVER.url, token=SERVER.token, ca_file=SERVER.ca_file)

    async def asyncTearDown(self) -> None:
        await self.aclient.close()

    async def test_from_kubeconfig(self) -> None:
        async with kplane.aio.AsyncClient.from_kubeconfig(SERVER.kubeconfig) as c:
            self.assertEqual(c.url, SERVER.url)
            self.assertTrue(await c.plane(kplane.ROOT).is_ready())
            self.assertEqual(c.cluster_base_url("x"), f"{SERVER.url}/clusters/x/control-plane")
            self.assertEqual(await c.openapi_spec(), kplane.openapi.load_spec())

    async def test_planes(self) -> None:
        name = unique("aplane")
        plane = await self.aclient.create_plane(name)
        self.assertIsInstance(plane, kplane.aio.AsyncPlane)
        await plane.wait_until_ready(timeout=30)
        self.assertTrue(await plane.is_ready())
        # The Plane's status follows readiness shortly after.
        ready = await asyncio.to_thread(eventually, lambda: self.client.get_plane(name).phase == "Ready")
        self.assertTrue(ready)
        self.assertEqual((await plane.info()).name, name)
        self.assertIn(name, [p.name for p in await self.aclient.list_planes()])
        self.assertEqual((await self.aclient.get_plane(name)).name, name)
        await self.aclient.delete_plane(name, wait=True, timeout=30)
        self.assertFalse(await plane.is_ready())

    async def test_errors(self) -> None:
        async with kplane.aio.AsyncClient(SERVER.url, token="wrong", ca_file=SERVER.ca_file) as bad:
            with self.assertRaises(kplane.UnauthorizedError) as err:
                await bad.list_planes()
            self.assertEqual(err.exception.code, 401)
        with self.assertRaises(kplane.NotFoundError):
            await self.aclient.get_plane(unique("nowhere"))
        with self.assertRaises(kplane.NotFoundError):
            await self.aclient.plane(unique("nowhere")).delete()
        with self.assertRaises(kplane.WaitTimeoutError):
            await self.aclient.plane(unique("nowhere")).wait_until_ready(timeout=0.3)
        with self.assertRaises(kplane.ConflictError):
            await self.aclient.create_plane(kplane.ROOT)

    async def test_state_and_watch(self) -> None:
        plane = self.aclient.plane(unique("astate"))
        snap = await plane.state(resource=["configmaps"], include_empty=True)
        self.assertEqual(snap.cluster, plane.name)
        watch = await plane.watch_state(snap.resource_version, resource="configmaps", timeout_seconds=30)
        async with watch:
            await asyncio.to_thread(create_configmap, self.client.plane(plane.name), "async-cm")
            async for event in watch:
                if event.type == "ADDED" and event.name == "async-cm":
                    break
            else:
                self.fail("the stream ended without the ADDED event")
        self.assertTrue(
            await asyncio.to_thread(
                eventually, lambda: self.client.plane(plane.name).state(resource="configmaps").by_resource("configmaps")
            )
        )
        with self.assertRaises(kplane.BadRequestError):
            await plane.state(resource="nosuchthings")

    async def test_audit_and_watch_audit(self) -> None:
        plane = self.aclient.plane(unique("aaudit"))
        await asyncio.to_thread(create_configmap, self.client.plane(plane.name), "first")
        watch = await plane.watch_audit(read_timeout=30)
        async with watch:
            await asyncio.to_thread(create_configmap, self.client.plane(plane.name), "second")
            async for event in watch:
                if event.verb == "create" and event.name == "second":
                    break
            else:
                self.fail("the followed trail ended without the create")
            self.assertGreater(watch.cursor, 0)
        events = await plane.audit(limit=1)
        self.assertEqual(len(events), 1)
        self.assertIsInstance(events[0], kplane.AuditEvent)
        with self.assertRaises(kplane.BadRequestError):
            await plane.audit(limit=0)

    async def test_concurrent_states(self) -> None:
        planes = [self.aclient.plane(unique("many")) for _ in range(16)]
        snaps = await asyncio.gather(*(p.state(resource="namespaces", include_empty=True) for p in planes))
        self.assertEqual([s.cluster for s in snaps], [p.name for p in planes])
        self.assertTrue(all(s.by_resource("namespaces") is not None for s in snaps))
        # Each plane was bootstrapped by its first request; its namespaces
        # reach the snapshot as soon as the watch cache has them.
        async def namespaces_shown(plane: kplane.aio.AsyncPlane) -> bool:
            for _ in range(100):
                if (await plane.state(resource="namespaces")).total_items() >= 4:
                    return True
                await asyncio.sleep(0.05)
            return False

        self.assertTrue(all(await asyncio.gather(*(namespaces_shown(p) for p in planes))))

    async def test_fleet(self) -> None:
        name = unique("afleet")
        fleet = await self.aclient.create_fleet(name, replicas=2, deletion_policy="Delete")
        self.assertIsInstance(fleet, kplane.aio.AsyncFleet)
        await fleet.wait_until_ready(timeout=60)
        self.assertEqual(fleet.status.ready_replicas, 2)
        self.assertEqual([m.name for m in fleet.members], [f"{name}-0000", f"{name}-0001"])
        self.assertTrue(fleet.is_ready)
        planes = await fleet.planes()
        self.assertTrue(all(await asyncio.gather(*(p.is_ready() for p in planes))))
        self.assertIs(await fleet.refresh(), fleet)
        self.assertIn(name, [f.name for f in await self.aclient.list_fleets()])
        self.assertEqual((await self.aclient.get_fleet(name)).spec.replicas, 2)
        await fleet.scale(3)
        await fleet.wait_until_ready(timeout=60)
        self.assertEqual(len(await fleet.planes()), 3)
        self.assertIs(await fleet.set_simulation({"readyDelay": "1s"}), fleet)
        self.assertEqual(fleet.spec.simulation, {"readyDelay": "1s"})
        await fleet.delete(wait=True, timeout=60)
        with self.assertRaises(kplane.NotFoundError):
            await self.aclient.get_fleet(name)

    async def test_ephemeral_fleet(self) -> None:
        name = unique("aeph")
        with self.assertRaisesRegex(RuntimeError, "boom"):
            async with self.aclient.ephemeral_fleet(name, replicas=2, wait_deleted=True) as fleet:
                await fleet.wait_until_ready(timeout=60)
                members = [p.name for p in await fleet.planes()]
                raise RuntimeError("boom")
        with self.assertRaises(kplane.NotFoundError):
            await self.aclient.get_fleet(name)
        for m in members:
            with self.assertRaises(kplane.NotFoundError):
                await self.aclient.get_plane(m)
        with self.assertRaises(kplane.WaitTimeoutError):
            async with self.aclient.ephemeral_fleet(unique("aeph"), names=[unique("m")]) as fleet:
                await fleet.wait_until_ready(timeout=0.01)


if __name__ == "__main__":
    unittest.main()
