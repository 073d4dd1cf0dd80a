"""What the tests against a real server share."""

from __future__ import annotations

import itertools
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

import kplane  # noqa: E402

_seq = itertools.count()


def unique(prefix: str) -> str:
    """A plane or Fleet name no other test uses."""
    return f"{prefix}-{os.getpid() % 1000}-{next(_seq)}"


def eventually(fn, timeout: float = 30.0, interval: float = 0.05):
    """Call ``fn`` until it returns a true value and return it. Snapshots
    are read from the watch caches, which follow the datastore closely but
    not synchronously, so a write is visible in a snapshot shortly after."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def configmap(name: str, namespace: str = "default", labels: dict[str, str] | None = None, data: dict[str, str] | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "data": data or {"k": "v"},
    }


def create_configmap(plane: kplane.Plane, name: str, **kw: object) -> dict:
    ns = str(kw.get("namespace", "default"))
    return plane.client.request("POST", plane.path(f"/api/v1/namespaces/{ns}/configmaps"), body=configmap(name, **kw))  # type: ignore[arg-type]


class ServerTestCase(unittest.TestCase):
    """Tests of a module that started a server (``server``, ``client``)."""

    server = None  # set by setUpModule
    client: kplane.Client
