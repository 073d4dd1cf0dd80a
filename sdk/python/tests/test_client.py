"""The synchronous client against a real kplane server."""

from __future__ import annotations

import json
import os
import re
import ssl
import sys
import time
import unittest
import urllib.request
from unittest import mock
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

from helpers import ServerTestCase, create_configmap, eventually, unique
from server import REPO, start_for_module

import kplane
from kplane.kubeconfig import KubeconfigError

SERVER = None


def setUpModule() -> None:
    global SERVER
    SERVER = start_for_module(unittest.addModuleCleanup)
    ServerTestCase.server = SERVER
    ServerTestCase.client = kplane.Client(SERVER.url, token=SERVER.token, ca_file=SERVER.ca_file)
    unittest.addModuleCleanup(ServerTestCase.client.close)


class ConnectTest(ServerTestCase):
    def test_token_and_ca(self) -> None:
        names = [p.name for p in self.client.list_planes()]
        self.assertIn("root", names)
        self.assertEqual(self.client.url, SERVER.url)

    def test_verify_tls_false(self) -> None:
        with kplane.Client(SERVER.url, token=SERVER.token, verify_tls=False) as c:
            self.assertTrue(c.plane(kplane.ROOT).is_ready())

    def test_unknown_ca_is_refused(self) -> None:
        with kplane.Client(SERVER.url, token=SERVER.token) as c:
            with self.assertRaisesRegex(kplane.TransportError, "TLS verification failed"):
                c.list_planes()

    def test_bad_token(self) -> None:
        with kplane.Client(SERVER.url, token="not-a-token", ca_file=SERVER.ca_file) as c:
            with self.assertRaises(kplane.UnauthorizedError) as err:
                c.list_planes()
            self.assertIsInstance(err.exception, kplane.ApiError)
            self.assertEqual(err.exception.code, 401)
            self.assertEqual(err.exception.reason, "Unauthorized")
            self.assertEqual(err.exception.status.raw.get("kind"), "Status")
            with self.assertRaises(kplane.UnauthorizedError):
                c.plane("anything").state()

    def test_no_server(self) -> None:
        from server import free_port

        with kplane.Client(f"https://127.0.0.1:{free_port()}", token="x", verify_tls=False, timeout=2) as c:
            with self.assertRaises(kplane.TransportError):
                c.list_planes()

    def test_from_kubeconfig(self) -> None:
        c = kplane.Client.from_kubeconfig(SERVER.kubeconfig)
        self.addCleanup(c.close)
        self.assertEqual(c.url, SERVER.url)
        self.assertIsNone(c.default_plane)
        self.assertIn("root", [p.name for p in c.list_planes()])
        # The same without PyYAML, with the SDK's own reader.
        with mock.patch.dict(sys.modules, {"yaml": None}):
            with kplane.Client.from_kubeconfig(SERVER.kubeconfig) as c2:
                self.assertEqual(c2.url, SERVER.url)
                self.assertTrue(c2.plane(kplane.ROOT).is_ready())
            with kplane.Client.from_kubeconfig(SERVER.kubeconfig_for(unique("kcm"))) as c3:
                self.assertIsNotNone(c3.default_plane)
        with self.assertRaisesRegex(KubeconfigError, "no context named 'nope'"):
            kplane.Client.from_kubeconfig(SERVER.kubeconfig, context="nope")

    def test_from_kubeconfig_env_and_context(self) -> None:
        old = os.environ.get("KUBECONFIG")
        os.environ["KUBECONFIG"] = SERVER.kubeconfig
        self.addCleanup(lambda: os.environ.pop("KUBECONFIG") if old is None else os.environ.__setitem__("KUBECONFIG", old))
        with open(SERVER.kubeconfig) as f:
            current = re.search(r"^current-context: *(\S+)", f.read(), re.M).group(1)
        with kplane.Client.from_kubeconfig(context=current) as c:
            self.assertTrue(c.plane(kplane.ROOT).is_ready())

    def test_from_plane_kubeconfig(self) -> None:
        name = unique("kc")
        path = SERVER.kubeconfig_for(name)
        with kplane.Client.from_kubeconfig(path) as c:
            self.assertEqual(c.default_plane, name)
            self.assertEqual(c.url, SERVER.url)
            self.assertEqual(c.cluster_base_url(name), f"{SERVER.url}/clusters/{name}/control-plane")
            # The plane's own credential works in its plane.
            c.request("GET", c.plane(name).path("/api/v1/namespaces"))
            self.assertTrue(c.plane(name).wait_until_ready(timeout=30).is_ready())

    def test_cluster_base_url_serves_kubernetes(self) -> None:
        name = unique("base")
        base = self.client.cluster_base_url(name)
        self.assertEqual(base, f"{SERVER.url}/clusters/{name}/control-plane")
        self.assertEqual(self.client.cluster_base_url(kplane.ROOT), SERVER.url)
        # Any HTTP client can use it: plain urllib here.
        req = urllib.request.Request(base + "/api/v1/namespaces", headers={"Authorization": f"Bearer {SERVER.token}"})
        ctx = ssl.create_default_context(cafile=SERVER.ca_file)
        with urllib.request.urlopen(req, context=ctx) as resp:
            names = {ns["metadata"]["name"] for ns in json.load(resp)["items"]}
        self.assertLessEqual({"default", "kube-system"}, names)
        with self.assertRaises(ValueError):
            self.client.cluster_base_url("Not_A_Plane")

    def test_connections_are_reused_across_threads(self) -> None:
        def ready(_: int) -> bool:
            return self.client.plane(kplane.ROOT).is_ready()

        with ThreadPoolExecutor(8) as pool:
            self.assertTrue(all(pool.map(ready, range(64))))


class ContractTest(ServerTestCase):
    def test_served_document_is_the_shipped_one(self) -> None:
        ctx = ssl.create_default_context(cafile=SERVER.ca_file)
        # Public: no token.
        with urllib.request.urlopen(SERVER.url + "/openapi/kplane.yaml", context=ctx) as resp:
            self.assertEqual(resp.read().decode(), kplane.openapi.spec_yaml())
        with urllib.request.urlopen(SERVER.url + "/openapi/kplane.json", context=ctx) as resp:
            self.assertEqual(resp.headers.get_content_type(), "application/json")
            self.assertEqual(json.load(resp), kplane.openapi.load_spec())
        self.assertEqual(self.client.openapi_spec(), kplane.openapi.load_spec())

    def test_shipped_document_is_the_repository_one(self) -> None:
        with open(os.path.join(REPO, "manifests", "openapi", "kplane.v1.yaml"), encoding="utf-8") as f:
            self.assertEqual(kplane.openapi.spec_yaml(), f.read())
        spec = kplane.openapi.load_spec()
        self.assertEqual(spec["openapi"], "3.1.0")
        self.assertIsNot(spec, kplane.openapi.load_spec())


class TemplatesTest(ServerTestCase):
    def test_template_member_and_reset(self) -> None:
        template = self.client.create_plane(unique("tmpl"))
        template.wait_until_ready(timeout=30)
        create_configmap(template, "scenario")
        member = self.client.create_plane(unique("member"), template=template.name)
        member.wait_until_ready(timeout=30)
        cms = lambda p: sorted(  # noqa: E731
            i["metadata"]["name"] for i in p.client.request("GET", p.path("/api/v1/namespaces/default/configmaps"))["items"]
        )
        self.assertIn("scenario", cms(member))
        create_configmap(member, "episode")
        self.client.request("DELETE", member.path("/api/v1/namespaces/default/configmaps/scenario"))
        self.assertEqual(cms(template), ["kube-root-ca.crt", "scenario"])
        with self.assertRaises(kplane.ForbiddenError):
            create_configmap(template, "late")
        member.reset()
        self.assertEqual(cms(member), ["kube-root-ca.crt", "scenario"])
        with self.assertRaises(kplane.ForbiddenError):
            template.reset()
        with self.assertRaises(kplane.InvalidError):
            self.client.create_plane(unique("orphan"), template="no-such-plane")
        with self.assertRaises(kplane.NotFoundError):
            self.client.plane("never-made").reset()

    def test_clone(self) -> None:
        source = self.client.create_plane(unique("src"))
        source.wait_until_ready(timeout=30)
        create_configmap(source, "before")
        clone = self.client.create_plane(unique("clone"), from_plane=source.name)
        clone.wait_until_ready(timeout=30)
        create_configmap(source, "after")
        cms = lambda p: sorted(  # noqa: E731
            i["metadata"]["name"] for i in p.client.request("GET", p.path("/api/v1/namespaces/default/configmaps"))["items"]
        )
        self.assertEqual(cms(clone), ["before", "kube-root-ca.crt"])
        self.assertEqual(cms(source), ["after", "before", "kube-root-ca.crt"])
        with self.assertRaises(kplane.InvalidError):
            self.client.create_plane(unique("orphan"), from_plane="no-such-plane")


    def test_faults_and_nodes(self) -> None:
        plane = self.client.create_plane(unique("faults"))
        plane.wait_until_ready(timeout=30)
        plane.set_nodes({"count": 1, "extendedResources": {"nvidia.com/gpu": 2}})
        plane.set_faults([{"type": "CrashLoopBackOff", "match": {"image": "*:broken"}, "exitCode": 2}])
        with self.assertRaises(kplane.InvalidError):
            plane.set_faults([{"type": "Meteorite"}])
        pods = plane.path("/api/v1/namespaces/default/pods")
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
               "spec": {"containers": [{"name": "web", "image": "app:broken",
                                        "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}
        self.client.request("POST", pods, body=pod)

        def crashed():
            status = self.client.request("GET", pods + "/web").get("status", {})
            for c in status.get("containerStatuses", []):
                last = c.get("lastState", {}).get("terminated") or {}
                if c.get("restartCount", 0) >= 1 and last.get("exitCode") == 2:
                    return status
            return None

        self.assertIsNotNone(eventually(crashed), self.client.request("GET", pods + "/web").get("status"))
        nodes = self.client.request("GET", plane.path("/api/v1/nodes"))["items"]
        self.assertEqual([n["status"]["allocatable"].get("nvidia.com/gpu") for n in nodes], ["2"])

        plane.set_faults([])

        def cured():
            status = self.client.request("GET", pods + "/web").get("status", {})
            ready = [c for c in status.get("conditions", []) if c["type"] == "Ready"]
            return status if ready and ready[0]["status"] == "True" else None

        self.assertIsNotNone(eventually(cured), self.client.request("GET", pods + "/web").get("status"))


    def test_timings(self) -> None:
        plane = self.client.create_plane(unique("timings"))
        plane.wait_until_ready(timeout=30)
        plane.set_timings(run_duration=timedelta(milliseconds=200), ready_delay="1h")
        spec = self.client.request("GET", f"/apis/kplane.dev/v1/planes/{plane.name}")["spec"]["simulation"]
        self.assertEqual((spec["runDuration"], spec["readyDelay"]), ("200ms", "1h"))
        with self.assertRaises(kplane.InvalidError):
            plane.set_timings(ready_delay=-1)
        pods = plane.path("/api/v1/namespaces/default/pods")
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
               "spec": {"containers": [{"name": "web", "image": "nginx"}]}}
        self.client.request("POST", pods, body=pod)

        def ready_is(want):
            status = self.client.request("GET", pods + "/web").get("status", {})
            ready = [c for c in status.get("conditions", []) if c["type"] == "Ready"]
            return status.get("phase") == "Running" and ready and ready[0]["status"] == want

        self.assertTrue(eventually(lambda: ready_is("False")), self.client.request("GET", pods + "/web").get("status"))
        plane.set_timings(ready_delay=0.1)
        self.assertTrue(eventually(lambda: ready_is("True")), self.client.request("GET", pods + "/web").get("status"))
        plane.set_timings()
        spec = self.client.request("GET", f"/apis/kplane.dev/v1/planes/{plane.name}")["spec"].get("simulation", {})
        self.assertNotIn("readyDelay", spec)
        self.assertNotIn("runDuration", spec)

    def test_set_simulation_replaces_it_whole(self) -> None:
        plane = self.client.create_plane(unique("wholesim"))
        plane.wait_until_ready(timeout=30)

        def simulation():
            return self.client.request("GET", f"/apis/kplane.dev/v1/planes/{plane.name}")["spec"].get("simulation")

        plane.set_simulation({"nodes": {"count": 1}, "readyDelay": "1s"})
        self.assertEqual(simulation(), {"nodes": {"count": 1}, "readyDelay": "1s"})
        plane.set_simulation({"runDuration": "200ms"})
        self.assertEqual(simulation(), {"runDuration": "200ms"})
        plane.set_simulation(None)
        self.assertIsNone(simulation())
        with self.assertRaises(kplane.InvalidError):
            plane.set_simulation({"faults": [{"type": "Explode"}]})


class LimitsTest(ServerTestCase):
    def test_limits_usage_and_refusal(self) -> None:
        plane = self.client.create_plane(unique("limits"), limits=kplane.PlaneLimits(max_objects=2))
        plane.wait_until_ready(timeout=30)
        self.assertEqual(self.client.get_plane(plane.name).limits, kplane.PlaneLimits(max_objects=2))
        create_configmap(plane, "one")
        create_configmap(plane, "two")
        with self.assertRaises(kplane.ForbiddenError) as refused:
            create_configmap(plane, "three")
        self.assertIn("exceeded quota", str(refused.exception))
        self.assertIn("maxObjects=2", str(refused.exception))
        # Written once the usage holds still for one 10 s pass.
        usage = eventually(lambda: (u := plane.usage()).objects == 2 and u, timeout=60.0)
        self.assertTrue(usage, plane.usage())
        self.assertGreater(usage.bytes, 0)

        plane.set_limits(kplane.PlaneLimits(max_objects=3))
        self.assertIsNotNone(eventually(lambda: _created(plane, "three")))
        plane.set_limits(None)
        self.assertIsNone(self.client.get_plane(plane.name).limits)
        with self.assertRaises(kplane.InvalidError):
            plane.set_limits(kplane.PlaneLimits(max_objects=-1))


def _created(plane: kplane.Plane, name: str) -> dict | None:
    try:
        return create_configmap(plane, name)
    except kplane.ForbiddenError:
        return None


class PlanesTest(ServerTestCase):
    def test_create_list_delete(self) -> None:
        name = unique("crud")
        plane = self.client.create_plane(name, labels={"team": "sdk"})
        self.assertIsInstance(plane, kplane.Plane)
        self.assertEqual(plane.name, name)
        plane.wait_until_ready(timeout=30)
        # A new plane stores nothing of its own (it stands on the server's
        # base plane); the Plane's status counts what it stores, shortly
        # after it changes.
        create_configmap(plane, "counted")
        def ready_info():
            info = plane.info()
            return info if info.phase == "Ready" and info.object_count else None

        info = eventually(ready_info)
        self.assertIsNotNone(info, plane.info())
        self.assertEqual((info.name, info.phase, info.labels.get("team")), (name, "Ready", "sdk"))
        self.assertGreater(info.object_count, 0)
        self.assertIsInstance(info.bootstrapped_at, datetime)
        self.assertIn(name, [p.name for p in self.client.list_planes(label_selector="team=sdk")])
        self.assertNotIn("root", [p.name for p in self.client.list_planes(label_selector="team=sdk")])

        with self.assertRaises(kplane.ConflictError) as err:
            self.client.create_plane(name)
        self.assertEqual((err.exception.code, err.exception.reason), (409, "AlreadyExists"))

        self.client.delete_plane(name, wait=True, timeout=30)
        with self.assertRaises(kplane.NotFoundError):
            self.client.get_plane(name)
        self.assertFalse(plane.is_ready())
        with self.assertRaises(kplane.NotFoundError) as err:
            self.client.delete_plane(name)
        self.assertEqual(err.exception.status.code, 404)

    def test_unknown_plane(self) -> None:
        plane = self.client.plane(unique("never"))
        self.assertFalse(plane.is_ready())
        with self.assertRaises(kplane.NotFoundError) as err:
            plane.info()
        self.assertEqual(err.exception.reason, "NotFound")
        # A probe does not bring a plane into being.
        self.assertFalse(plane.is_ready())
        self.assertNotIn(plane.name, [p.name for p in self.client.list_planes()])

    def test_wait_timeout(self) -> None:
        plane = self.client.plane(unique("late"))
        start = time.monotonic()
        with self.assertRaises(kplane.WaitTimeoutError) as err:
            plane.wait_until_ready(timeout=0.5)
        self.assertIsInstance(err.exception, TimeoutError)
        self.assertIn(plane.name, str(err.exception))
        self.assertLess(time.monotonic() - start, 5)

    def test_first_request_creates_plane(self) -> None:
        plane = self.client.plane(unique("lazy"))
        self.client.request("GET", plane.path("/api/v1/namespaces"))
        plane.wait_until_ready(timeout=30)
        self.assertTrue(eventually(lambda: plane.info().phase == "Ready"))

    def test_invalid_ids(self) -> None:
        for bad in ("Bad_ID", "", "-x", "a" * 64, "a.b"):
            with self.assertRaises(ValueError):
                self.client.create_plane(bad)
            with self.assertRaises(ValueError):
                self.client.plane(bad)
        with self.assertRaises(ValueError):
            self.client.delete_plane(kplane.ROOT)
        # What the client does not check, the server refuses with a Status.
        with self.assertRaises(kplane.InvalidError) as err:
            self.client.request(
                "POST", "/apis/kplane.dev/v1/planes", body={"apiVersion": "kplane.dev/v1", "kind": "Plane", "metadata": {"name": "Bad_ID"}}
            )
        self.assertEqual(err.exception.code, 422)
        self.assertIn("Bad_ID", err.exception.message)


class SnapshotTest(ServerTestCase):
    def test_state(self) -> None:
        plane = self.client.plane(unique("snap"))
        for i in range(3):
            create_configmap(plane, f"cm-{i}", labels={"i": str(i)})
        before = datetime.now(timezone.utc)
        want = {"default/cm-0", "default/cm-1", "default/cm-2"}

        def complete():
            snap = plane.state()
            cms = snap.by_resource("configmaps")
            return snap if cms and want <= set(cms.names()) else None

        snap = eventually(complete)
        self.assertIsNotNone(snap, "the configmaps never showed in a snapshot")
        self.assertIsInstance(snap, kplane.Snapshot)
        self.assertEqual(snap.cluster, plane.name)
        self.assertIsNotNone(snap.snapshot_time.tzinfo)
        self.assertLess(abs(snap.snapshot_time - before), timedelta(seconds=30))
        self.assertTrue(snap.resource_version)
        self.assertGreater(snap.live_resources, 0)
        self.assertEqual(snap.total_items(), sum(len(r.items) for r in snap.resources))
        cms = snap.by_resource("configmaps")
        self.assertIsInstance(cms, kplane.SnapshotResource)
        self.assertEqual((cms.group, cms.version, cms.kind, cms.namespaced, cms.synced), ("", "v1", "ConfigMap", True, True))
        self.assertEqual(cms.item_count, len(cms.items))
        for item in cms.items:
            self.assertEqual((item["apiVersion"], item["kind"]), ("v1", "ConfigMap"))
            self.assertNotIn("managedFields", item["metadata"])
        ns = snap.by_resource("namespaces")
        self.assertLessEqual({"default", "kube-system"}, {i["metadata"]["name"] for i in ns.items})
        self.assertIsNone(snap.by_resource("deployments.apps"))  # empty, so left out

    def test_filters(self) -> None:
        plane = self.client.plane(unique("filt"))
        create_configmap(plane, "a", labels={"app": "x"})
        create_configmap(plane, "b", labels={"app": "y"})

        def both():
            snap = plane.state(resource="configmaps")
            return snap if {"default/a", "default/b"} <= set(snap.by_resource("configmaps").names()) else None

        only = eventually(both)
        self.assertEqual([r.name for r in only.resources], ["configmaps"])
        two = plane.state(resource=["configmaps", "namespaces"], include_empty=True)
        self.assertEqual(sorted(r.name for r in two.resources), ["configmaps", "namespaces"])
        empty = plane.state(resource="apps/deployments", include_empty=True)
        deps = empty.by_resource("deployments.apps")
        self.assertIsNotNone(deps)
        self.assertIs(empty.by_resource("apps/deployments"), deps)
        self.assertEqual((deps.item_count, deps.items, deps.kind), (0, [], "Deployment"))
        self.assertEqual(plane.state(resource="deployments.apps").resources, [])
        selected = plane.state(resource="configmaps", label_selector="app=x").by_resource("configmaps")
        self.assertEqual(selected.names(), ["default/a"])
        in_ns = plane.state(namespace="kube-system", include_empty=True)
        self.assertTrue(all(r.namespaced for r in in_ns.resources))
        warm = plane.state(warm=True, include_empty=True)
        self.assertTrue(all(r.synced for r in warm.resources))
        self.assertEqual(warm.live_resources, len(warm.resources))

    def test_unknown_resource(self) -> None:
        with self.assertRaises(kplane.BadRequestError) as err:
            self.client.plane(unique("bad")).state(resource=["configmaps", "nosuchthings"])
        self.assertEqual((err.exception.code, err.exception.reason), (400, "BadRequest"))
        self.assertIn("nosuchthings", err.exception.message)

    def test_root_plane(self) -> None:
        snap = self.client.plane(kplane.ROOT).state(resource="namespaces")
        self.assertEqual(snap.cluster, "root")

    def test_watch_state(self) -> None:
        plane = self.client.plane(unique("watch"))
        create_configmap(plane, "before")

        def with_before():
            snap = plane.state(resource="configmaps")
            cms = snap.by_resource("configmaps")
            return snap if cms and "default/before" in cms.names() else None

        snap = eventually(with_before)
        seen: list[tuple[str, str]] = []
        with plane.watch_state(snap.resource_version, resource="configmaps", timeout_seconds=30) as watch:
            self.assertIsInstance(watch, kplane.StateWatch)
            path = plane.path("/api/v1/namespaces/default/configmaps")
            self.client.request("POST", path, body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w"}, "data": {"n": "1"}})
            self.client.request(
                "PATCH", path + "/w", body=b'{"data":{"n":"2"}}', headers={"Content-Type": "application/merge-patch+json"}
            )
            self.client.request("DELETE", path + "/w")
            for event in watch:
                self.assertIsInstance(event, kplane.StateEvent)
                if event.type == "BOOKMARK":
                    self.assertTrue(event.resource_version)
                    continue
                self.assertEqual((event.group, event.resource), ("", "configmaps"))
                self.assertEqual(event.object["kind"], "ConfigMap")
                seen.append((event.type, event.name))
                if event.type == "DELETED":
                    break
        self.assertNotIn(("ADDED", "before"), seen)  # it was in the snapshot
        self.assertEqual(seen, [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")])

    def test_watch_from_scratch_and_timeout(self) -> None:
        plane = self.client.plane(unique("scratch"))
        create_configmap(plane, "one")
        with plane.watch_state(resource="configmaps", timeout_seconds=10) as watch:
            found = any(e.type == "ADDED" and e.name == "one" for e in watch)
        self.assertTrue(found)
        # The server ends a stream after timeout_seconds; iteration stops.
        start = time.monotonic()
        with plane.watch_state(resource="configmaps", timeout_seconds=1) as watch:
            events = list(watch)
        self.assertLess(time.monotonic() - start, 10)
        self.assertIn("one", [e.name for e in events])

    def test_watch_read_timeout(self) -> None:
        plane = self.client.plane(unique("quiet"))
        # Nothing writes deployments in this plane: the stream stays silent.
        snap = plane.state(resource="deployments.apps", include_empty=True)
        with plane.watch_state(snap.resource_version, resource="deployments.apps", read_timeout=0.3) as watch:
            start = time.monotonic()
            with self.assertRaisesRegex(kplane.TransportError, "timed out"):
                for event in watch:
                    self.assertEqual(event.type, "BOOKMARK")
            self.assertLess(time.monotonic() - start, 10)

    def test_watch_too_old(self) -> None:
        plane = self.client.plane(unique("old"))
        create_configmap(plane, "x")
        with self.assertRaises(kplane.GoneError) as err:
            plane.watch_state("1", resource="configmaps", timeout_seconds=5)
        self.assertEqual((err.exception.code, err.exception.reason), (410, "Expired"))


class AuditTest(ServerTestCase):
    def test_audit_records_requests_in_order(self) -> None:
        plane = self.client.plane(unique("audit"))
        create_configmap(plane, "one")
        with self.assertRaises(kplane.ConflictError):
            create_configmap(plane, "one")
        with self.assertRaises(kplane.NotFoundError):
            self.client.request("GET", plane.path("/api/v1/namespaces/default/configmaps/missing"))

        def mine():
            events = [e for e in plane.audit() if e.resource == "configmaps"]
            return events if len(events) >= 3 else None

        events = eventually(mine)
        self.assertEqual([(e.verb, e.name, e.code) for e in events[:3]], [("create", "one", 201), ("create", "one", 409), ("get", "missing", 404)])
        for e in events:
            self.assertIsInstance(e, kplane.AuditEvent)
            self.assertEqual(e.raw["apiVersion"], "audit.k8s.io/v1")
            self.assertEqual(e.raw["annotations"]["kplane.dev/plane"], plane.name)
            self.assertEqual(e.level, "Metadata")
            self.assertIsNone(e.request_object)
            self.assertTrue(e.user)
            self.assertGreaterEqual(e.latency, timedelta(0))
        cursors = [e.cursor for e in events]
        self.assertEqual(cursors, sorted(cursors))
        # since= a cursor: only what came after; limit caps the count.
        after = plane.audit(since=events[0].cursor, limit=2)
        self.assertEqual(len(after), 2)
        self.assertEqual(after[0].cursor, events[0].cursor + 1)
        # since= a time: from then on.
        self.assertTrue(all(e.stage_timestamp >= events[1].stage_timestamp for e in plane.audit(since=events[1].stage_timestamp)))
        # Another plane's trail holds none of it.
        other = self.client.plane(unique("audit-other"))
        create_configmap(other, "two")
        self.assertNotIn("one", [e.name for e in other.audit()])

    def test_audit_level_and_bad_input(self) -> None:
        plane = self.client.plane(unique("audit-level"))
        create_configmap(plane, "first")
        plane.set_audit_level("RequestResponse")

        def with_body():
            name = unique("body")
            create_configmap(plane, name)
            found = [e for e in plane.audit() if e.verb == "create" and e.name == name]
            return found[0] if found and found[0].request_object else None

        event = eventually(with_body)
        self.assertEqual(event.level, "RequestResponse")
        self.assertEqual(event.response_object["kind"], "ConfigMap")
        with self.assertRaises(kplane.InvalidError) as err:
            plane.set_audit_level("Everything")
        self.assertEqual(err.exception.code, 422)
        self.assertIn("spec.audit.level", err.exception.message)
        with self.assertRaises(kplane.BadRequestError) as bad:
            plane.audit(since="yesterday")
        self.assertIn("since", bad.exception.message)
        with self.assertRaises(kplane.BadRequestError):
            plane.audit(limit=0)
        with self.assertRaises(kplane.GoneError):
            plane.audit(since=10**9)
        with self.assertRaises(ValueError):
            plane.audit(since=datetime(2026, 1, 1))

    def test_watch_audit_follows(self) -> None:
        plane = self.client.plane(unique("audit-watch"))
        create_configmap(plane, "before")
        seen: list[str] = []
        with plane.watch_audit(read_timeout=30) as watch:
            self.assertIsInstance(watch, kplane.AuditWatch)
            for event in watch:
                if event.verb == "create" and event.resource == "configmaps":
                    seen.append(event.name)
                    if event.name == "before":
                        create_configmap(plane, "after")
                    if event.name == "after":
                        break
            self.assertGreater(watch.cursor, 0)
        self.assertEqual(seen, ["before", "after"])

    def test_audit_needs_permission(self) -> None:
        plane = self.client.plane(unique("audit-rbac"))
        base = "/api/v1/namespaces/default/serviceaccounts"
        self.client.request("POST", plane.path(base), body={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "agent"}})
        token = self.client.request("POST", plane.path(base + "/agent/token"), body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})[
            "status"
        ]["token"]
        with kplane.Client(SERVER.url, token=token, ca_file=SERVER.ca_file) as agent:
            with self.assertRaises(kplane.ForbiddenError) as err:
                agent.plane(plane.name).audit()
            self.assertEqual(err.exception.code, 403)
            self.assertIn("kplane.dev", err.exception.message)


class FleetTest(ServerTestCase):
    def test_lifecycle(self) -> None:
        name = unique("fl")
        prefix = name + "-m"
        fleet = self.client.create_fleet(name, replicas=3, name_prefix=prefix)
        self.assertIsInstance(fleet, kplane.Fleet)
        self.assertEqual((fleet.spec.replicas, fleet.spec.name_prefix, fleet.spec.deletion_policy), (3, prefix, "Retain"))
        self.assertIs(fleet.wait_until_ready(timeout=60), fleet)
        self.assertEqual(fleet.status.ready_replicas, 3)
        self.assertEqual(fleet.status.replicas, 3)
        self.assertEqual([m.name for m in fleet.members], [f"{prefix}0000", f"{prefix}0001", f"{prefix}0002"])
        self.assertTrue(all(m.phase == "Ready" and isinstance(m, kplane.FleetMember) for m in fleet.members))
        self.assertEqual(fleet.status.condition("Ready").status, "True")
        planes = fleet.planes()
        self.assertEqual([p.name for p in planes], [m.name for m in fleet.members])
        for p in planes:
            self.assertTrue(p.is_ready())
            self.assertEqual(p.info().fleet, name)
        self.assertIn(name, [f.name for f in self.client.list_fleets()])
        self.assertEqual(self.client.get_fleet(name).status.ready_replicas, 3)

        fleet.scale(4).wait_until_ready(timeout=60)
        self.assertEqual(len(fleet.planes()), 4)
        self.assertIs(fleet.refresh(), fleet)

        fleet.delete(wait=True, timeout=60)
        with self.assertRaises(kplane.NotFoundError):
            self.client.get_fleet(name)
        # Retain: the planes stay, without the fleet label.
        for p in planes:
            self.assertIsNone(p.info().fleet)
            p.delete()

    def test_template_and_simulation(self) -> None:
        template = self.client.create_plane(unique("fltmpl"))
        template.wait_until_ready(timeout=30)
        create_configmap(template, "scenario")
        name = unique("flsim")
        fleet = self.client.create_fleet(
            name, replicas=2, deletion_policy="Delete", template=template.name,
            simulation={"nodes": {"count": 1}, "readyDelay": "1h"}, limits=kplane.PlaneLimits(max_objects=50),
        )
        self.assertEqual((fleet.spec.template, fleet.spec.simulation), (template.name, {"nodes": {"count": 1}, "readyDelay": "1h"}))
        self.assertEqual(fleet.spec.limits, kplane.PlaneLimits(max_objects=50))
        fleet.wait_until_ready(timeout=60)
        for p in fleet.planes():
            self.assertTrue(eventually(lambda: self.client.get_plane(p.name).limits == kplane.PlaneLimits(max_objects=50)))

        def simulations():
            return [self.client.request("GET", f"/apis/kplane.dev/v1/planes/{p.name}")["spec"].get("simulation")
                    for p in fleet.planes()]

        self.assertEqual(simulations(), [{"nodes": {"count": 1}, "readyDelay": "1h0m0s"}] * 2)
        member = fleet.planes()[0]
        member.client.request("GET", member.path("/api/v1/namespaces/default/configmaps/scenario"))

        # Replaced whole: the node shape the new one leaves out is gone.
        self.assertIs(fleet.set_simulation({"runDuration": "200ms"}), fleet)
        self.assertEqual(fleet.spec.simulation, {"runDuration": "200ms"})
        self.assertTrue(eventually(lambda: simulations() == [{"runDuration": "200ms"}] * 2), simulations())
        fleet.set_simulation(None)
        self.assertIsNone(fleet.spec.simulation)
        self.assertTrue(eventually(lambda: simulations() == [None, None]), simulations())
        with self.assertRaises(kplane.InvalidError):
            fleet.set_simulation({"runDuration": "soon"})
        with self.assertRaises(ValueError):
            self.client.create_fleet(unique("flbad"), replicas=1, simulation="fast")  # type: ignore[arg-type]
        fleet.delete(wait=True, timeout=60)

    def test_named_members(self) -> None:
        existing = self.client.create_plane(unique("adopt"))
        names = [existing.name, unique("named")]
        fleet = self.client.create_fleet(unique("fln"), names=names, deletion_policy="Delete")
        fleet.wait_until_ready(timeout=60)
        self.assertEqual(sorted(p.name for p in fleet.planes()), sorted(names))
        fleet.delete(wait=True, timeout=60)
        for n in names:
            with self.assertRaises(kplane.NotFoundError):
                self.client.get_plane(n)

    def test_ephemeral_fleet_deletes_on_exception(self) -> None:
        name = unique("eph")
        with self.assertRaisesRegex(RuntimeError, "episode failed"):
            with self.client.ephemeral_fleet(name, replicas=2, wait_deleted=True) as fleet:
                fleet.wait_until_ready(timeout=60)
                members = [p.name for p in fleet.planes()]
                raise RuntimeError("episode failed")
        with self.assertRaises(kplane.NotFoundError):
            self.client.get_fleet(name)
        for m in members:  # deletionPolicy Delete is the ephemeral default
            with self.assertRaises(kplane.NotFoundError):
                self.client.get_plane(m)

    def test_invalid_fleets(self) -> None:
        with self.assertRaises(ValueError):
            self.client.create_fleet(unique("bad"), replicas=2, names=["a"])
        with self.assertRaises(ValueError):
            self.client.create_fleet(unique("bad"))
        with self.assertRaises(ValueError):
            self.client.create_fleet(unique("bad"), names=["a"], name_prefix="p-")
        with self.assertRaises(ValueError):
            self.client.create_fleet(unique("bad"), replicas=1, deletion_policy="Sometimes")
        with self.assertRaises(kplane.InvalidError) as err:
            self.client.create_fleet(unique("bad"), names=["Not_A_Plane"])
        self.assertEqual(err.exception.code, 422)
        self.assertIn("Not_A_Plane", err.exception.message)
        with self.assertRaises(kplane.NotFoundError):
            self.client.get_fleet(unique("missing"))

    def test_wait_timeout_names_failed_members(self) -> None:
        shared = unique("owned")
        owner = self.client.create_fleet(unique("owner"), names=[shared], deletion_policy="Delete")
        self.addCleanup(owner.delete)
        owner.wait_until_ready(timeout=60)
        rival = self.client.create_fleet(unique("rival"), names=[shared])
        self.addCleanup(rival.delete)
        with self.assertRaises(kplane.WaitTimeoutError) as err:
            rival.wait_until_ready(timeout=1.5)
        self.assertIn(shared, str(err.exception))
        self.assertIn("0/1", str(err.exception))


class QuickstartTest(ServerTestCase):
    """The README's quickstart, run as written (server URL and token
    substituted)."""

    def test_readme_quickstart(self) -> None:
        with open(os.path.join(REPO, "sdk", "python", "README.md"), encoding="utf-8") as f:
            readme = f.read()
        code = re.search(r"## Quickstart\n.*?```python\n(.*?)```", readme, re.S).group(1)
        self.assertIn('"https://127.0.0.1:6443"', code)
        code = code.replace('"https://127.0.0.1:6443"', repr(SERVER.url)).replace('"…"', repr(SERVER.token))
        scores: list[int] = []

        def score_state(snap: kplane.Snapshot) -> int:
            scores.append(snap.total_items())
            return snap.total_items()

        env = {"score_state": score_state, "print": lambda *a: None}
        start = time.monotonic()
        exec(compile(code, "README.md quickstart", "exec"), env)
        elapsed = time.monotonic() - start
        env["client"].close()
        self.assertEqual(len(scores), 64)
        self.assertTrue(all(s > 0 for s in scores))
        print(f"\nquickstart: 64-plane ephemeral fleet ready and scored in {elapsed:.1f}s", end=" ")
        fleet = self.client.get_fleet("rl-rollout") if self._exists("rl-rollout") else None
        self.assertTrue(fleet is None or fleet.deleting)

    def _exists(self, name: str) -> bool:
        try:
            self.client.get_fleet(name)
        except kplane.NotFoundError:
            return False
        return True


if __name__ == "__main__":
    unittest.main()
