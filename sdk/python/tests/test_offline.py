"""The SDK without a server: models, kubeconfig reading, argument checks,
the shipped contract, and installation with pip."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import unittest
from unittest import mock
from datetime import datetime, timedelta, timezone

import helpers  # noqa: F401  (puts src/ on sys.path)
from server import REPO

import kplane
from kplane import kubeconfig
from kplane._http import encode_query
from kplane.models import parse_time


class ModelsTest(unittest.TestCase):
    def test_parse_time(self) -> None:
        self.assertEqual(parse_time("2026-11-22T06:00:00Z"), datetime(2026, 11, 22, 6, tzinfo=timezone.utc))
        self.assertEqual(parse_time("2026-11-22T06:00:00.123456789Z").microsecond, 123456)
        self.assertEqual(parse_time("2026-11-22T08:00:00+02:00"), datetime(2026, 11, 22, 6, tzinfo=timezone.utc))
        self.assertEqual(parse_time("2026-11-22T08:00:00+02:00").utcoffset(), timedelta(hours=2))
        self.assertIsNone(parse_time(""))
        with self.assertRaises(ValueError):
            parse_time("yesterday")

    def test_snapshot(self) -> None:
        snap = kplane.Snapshot.from_dict(
            {
                "cluster": "a",
                "snapshotTime": "2026-11-22T06:00:00Z",
                "resourceVersion": "9",
                "liveResources": 2,
                "resources": [
                    {"group": "", "version": "v1", "resource": "pods", "kind": "Pod", "namespaced": True, "synced": True, "itemCount": 2, "items": [{"metadata": {"name": "p", "namespace": "d"}}, {"metadata": {"name": "q", "namespace": "d"}}]},
                    {"group": "apps", "version": "v1", "resource": "deployments", "kind": "Deployment", "namespaced": True, "synced": True, "itemCount": 1, "items": [{"metadata": {"name": "x", "namespace": "d"}}]},
                ],
            }
        )
        self.assertEqual(snap.total_items(), 3)
        self.assertEqual(snap.by_resource("pods").names(), ["d/p", "d/q"])
        for name in ("deployments.apps", "apps/deployments", "apps/v1/deployments"):
            self.assertEqual(snap.by_resource(name).kind, "Deployment")
        self.assertIsNone(snap.by_resource("deployments"))
        self.assertIsNone(snap.by_resource("configmaps"))

    def test_state_events(self) -> None:
        bookmark = kplane.StateEvent.from_dict({"type": "BOOKMARK", "resourceVersion": "67", "object": {"metadata": {"resourceVersion": "67"}}})
        self.assertEqual((bookmark.type, bookmark.resource_version, bookmark.name), ("BOOKMARK", "67", ""))
        added = kplane.StateEvent.from_dict(
            {"type": "ADDED", "group": "apps", "resource": "deployments", "object": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w", "namespace": "d", "resourceVersion": "70"}}}
        )
        self.assertEqual((added.name, added.namespace, added.resource_version, added.group), ("w", "d", "70", "apps"))

    def test_status_of_plain_text(self) -> None:
        st = kplane.Status.from_response(503, b"plane x is not ready: pending", "Service Unavailable")
        self.assertEqual((st.code, st.reason, st.message), (503, "ServiceUnavailable", "plane x is not ready: pending"))
        err = kplane.ApiError.from_status(st)
        self.assertIsInstance(err, kplane.ServerError)
        self.assertIsInstance(kplane.ApiError.from_status(kplane.Status(code=410, reason="Expired")), kplane.GoneError)

    def test_encode_query(self) -> None:
        self.assertEqual(
            encode_query({"resource": ["pods", "deployments.apps"], "warm": True, "includeEmpty": None, "labelSelector": "a=b,c"}),
            "resource=pods&resource=deployments.apps&warm=true&labelSelector=a%3Db%2Cc",
        )


class KubeconfigTest(unittest.TestCase):
    def write(self, text: str) -> str:
        fd, path = tempfile.mkstemp(suffix=".kubeconfig")
        with os.fdopen(fd, "w") as f:
            f.write(textwrap.dedent(text))
        self.addCleanup(os.remove, path)
        return path

    def test_block_yaml_without_pyyaml(self) -> None:
        text = """\
            apiVersion: v1
            clusters:
            - cluster:
                certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
                server: https://10.0.0.1:6443/clusters/team-a/control-plane
              name: kplane
            - cluster:
                insecure-skip-tls-verify: true
                server: "https://other:6443"
              name: other
            contexts:
            - context:
                cluster: kplane
                user: admin
              name: kplane
            - context: {cluster: other, user: admin}
              name: flow
            - name: other
              context:
                cluster: other
                user: admin
            current-context: kplane
            kind: Config
            preferences: {}
            users:
            - name: admin
              user:
                token: 'abc''def'   # a comment
            """
        path = self.write(text)
        parsed = kubeconfig._MiniYAML(textwrap.dedent(text).replace("- context: {cluster: other, user: admin}\n  name: flow\n", ""), path).parse()
        self.assertEqual(parsed["users"][0]["user"]["token"], "abc'def")
        self.assertEqual(parsed["preferences"], {})
        with self.assertRaisesRegex(kubeconfig.KubeconfigError, "flow collections"):
            kubeconfig._MiniYAML(textwrap.dedent(text), path).parse()

        clean = self.write(textwrap.dedent(text).replace("- context: {cluster: other, user: admin}\n  name: flow\n", ""))
        with mock.patch.dict(sys.modules, {"yaml": None}):  # as without PyYAML
            creds = kubeconfig.resolve(clean)
            other = kubeconfig.resolve(clean, context="other")
        self.assertEqual((creds.server, creds.plane, creds.token), ("https://10.0.0.1:6443", "team-a", "abc'def"))
        self.assertTrue(creds.verify_tls)
        self.assertIn("BEGIN CERTIFICATE", creds.ca_data)
        self.assertEqual((other.server, other.plane, other.verify_tls), ("https://other:6443", None, False))

    def test_json(self) -> None:
        path = self.write(
            '{"clusters":[{"name":"c","cluster":{"server":"https://h:1"}}],"users":[{"name":"u","user":{"token":"t"}}],'
            '"contexts":[{"name":"x","context":{"cluster":"c","user":"u"}}],"current-context":"x"}'
        )
        creds = kubeconfig.resolve(path)
        self.assertEqual((creds.server, creds.token), ("https://h:1", "t"))

    def test_errors(self) -> None:
        with self.assertRaisesRegex(kubeconfig.KubeconfigError, "no context given"):
            kubeconfig.resolve(self.write("apiVersion: v1\nkind: Config\n"))
        with self.assertRaisesRegex(kubeconfig.KubeconfigError, "reading kubeconfig"):
            kubeconfig.resolve("/nonexistent/kubeconfig")
        exec_user = self.write(
            '{"clusters":[{"name":"c","cluster":{"server":"https://h:1"}}],"users":[{"name":"u","user":{"exec":{"command":"x"}}}],'
            '"contexts":[{"name":"x","context":{"cluster":"c","user":"u"}}],"current-context":"x"}'
        )
        with self.assertRaisesRegex(kubeconfig.KubeconfigError, "authenticates with exec"):
            kubeconfig.resolve(exec_user)
        with self.assertRaisesRegex(kubeconfig.KubeconfigError, "line 2"):
            kubeconfig._MiniYAML("a: 1\n   b: 2\n", "x").parse()


class ArgumentsTest(unittest.TestCase):
    def test_checked_before_any_request(self) -> None:
        # Port 9 (discard) on loopback: a request would fail with TransportError.
        client = kplane.Client("https://127.0.0.1:9", token="t", verify_tls=False)
        for call in (
            lambda: client.create_fleet("f"),
            lambda: client.create_fleet("f", replicas=1, names=["a"]),
            lambda: client.create_fleet("f", names="abc"),
            lambda: client.create_plane("No"),
            lambda: client.plane("a/b"),
        ):
            with self.assertRaises(ValueError):
                call()
        with self.assertRaises(ValueError):
            kplane.Client("ftp://x")


class ContractTest(unittest.TestCase):
    def test_operations_the_sdk_calls_are_in_the_contract(self) -> None:
        spec = kplane.openapi.load_spec()
        calls = {
            ("/clusters/{cluster}/control-plane/snapshot", "get"),
            ("/snapshot", "get"),
            ("/clusters/{cluster}/control-plane/readyz", "get"),
            ("/apis/kplane.dev/v1/planes", "get"),
            ("/apis/kplane.dev/v1/planes", "post"),
            ("/apis/kplane.dev/v1/planes/{name}", "get"),
            ("/apis/kplane.dev/v1/planes/{name}", "delete"),
            ("/apis/kplane.dev/v1/fleets", "get"),
            ("/apis/kplane.dev/v1/fleets", "post"),
            ("/apis/kplane.dev/v1/fleets/{name}", "get"),
            ("/apis/kplane.dev/v1/fleets/{name}", "patch"),
            ("/apis/kplane.dev/v1/fleets/{name}", "delete"),
            ("/openapi/kplane.json", "get"),
        }
        for path, method in sorted(calls):
            self.assertIn(method, spec["paths"].get(path, {}), f"{method} {path}")
        schemas = spec["components"]["schemas"]
        self.assertLessEqual(
            {"cluster", "snapshotTime", "resourceVersion", "liveResources", "resources"}, set(schemas["Snapshot"]["properties"])
        )
        self.assertLessEqual({"group", "version", "resource", "kind", "synced", "itemCount", "items"}, set(schemas["SnapshotResource"]["properties"]))
        self.assertLessEqual({"replicas", "readyReplicas", "observedGeneration", "members", "conditions"}, set(schemas["FleetStatus"]["properties"]))

    def test_yaml_and_json_agree(self) -> None:
        try:
            import yaml  # type: ignore[import-untyped]
        except ImportError:
            self.fail("PyYAML is not installed (pip install pyyaml; .ci/run checks for it)")
        self.assertEqual(yaml.safe_load(kplane.openapi.spec_yaml()), kplane.openapi.load_spec())


class InstallTest(unittest.TestCase):
    def test_pip_install(self) -> None:
        """``pip install ./sdk/python`` works offline and the installed
        package is complete (spec files included)."""
        with tempfile.TemporaryDirectory() as target:
            subprocess.run(
                [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", target, os.path.join(REPO, "sdk", "python")],
                check=True,
                capture_output=True,
                env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INDEX": "1"},
            )
            out = subprocess.run(
                [sys.executable, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1]); import kplane, kplane.aio; "
                 "print(kplane.__file__); print(kplane.__version__, kplane.openapi.load_spec()['openapi'], len(kplane.openapi.spec_yaml()) > 0)", target],
                check=True,
                capture_output=True,
                text=True,
                cwd=target,
            ).stdout.split("\n")
            self.assertTrue(out[0].startswith(target), out)
            self.assertEqual(out[1], f"{kplane.__version__} 3.1.0 True")


if __name__ == "__main__":
    unittest.main()
