"""The contract this SDK is built against: kplane's OpenAPI 3.1 document,
shipped inside the package (identical to ``manifests/openapi/kplane.v1.yaml``
of the server's repository and to what a server answers at
``GET /openapi/kplane.yaml``)."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

__all__ = ["spec_yaml", "spec_json", "load_spec", "SPEC_FILE"]

#: The document's file name inside the package.
SPEC_FILE = "kplane.v1.yaml"


def _read(name: str) -> str:
    return resources.files("kplane").joinpath("_spec", name).read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def spec_yaml() -> str:
    """The document as YAML, exactly as the server's repository has it."""
    return _read(SPEC_FILE)


@lru_cache(maxsize=1)
def spec_json() -> str:
    """The document as JSON (generated from the YAML, same content)."""
    return _read("kplane.v1.json")


def load_spec() -> dict[str, Any]:
    """The document as a dict (a fresh copy each call); needs no YAML parser."""
    return json.loads(spec_json())
