"""A PEP 517/660 build backend for the kplane SDK, standard library only.

It builds a pure-Python wheel (and an sdist) from src/kplane with the
metadata of pyproject.toml's [project] table, so installing the SDK works
on machines that cannot download setuptools.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "kplane"
SRC = os.path.join(ROOT, "src", PACKAGE)


def _project() -> dict[str, str]:
    """The string keys of pyproject.toml's [project] table (tomllib is not
    in Python 3.10's standard library)."""
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    table = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.S | re.M)
    out: dict[str, str] = {}
    for key, value in re.findall(r'^([A-Za-z-]+)\s*=\s*"([^"]*)"\s*$', table.group(1) if table else "", re.M):
        out[key] = value
    return out


def _metadata() -> str:
    p = _project()
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {p['name']}",
        f"Version: {p['version']}",
        f"Summary: {p.get('description', '')}",
        f"Requires-Python: {p.get('requires-python', '>=3.10')}",
        f"License: {p.get('license', '')}",
        "Classifier: Programming Language :: Python :: 3",
        "Classifier: Typing :: Typed",
        "Description-Content-Type: text/markdown",
        "",
    ]
    readme = os.path.join(ROOT, p.get("readme", "README.md"))
    body = open(readme, encoding="utf-8").read() if os.path.exists(readme) else ""
    return "\n".join(lines) + "\n" + body


def _names() -> tuple[str, str]:
    p = _project()
    return p["name"], p["version"]


def _dist_info() -> str:
    name, version = _names()
    return f"{name}-{version}.dist-info"


def _package_files() -> list[tuple[str, str]]:
    """(path in the wheel, path on disk) of every file of the package."""
    out = []
    for dirpath, dirnames, filenames in os.walk(SRC):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if fn.endswith((".pyc", ".pyo")):
                continue
            disk = os.path.join(dirpath, fn)
            out.append((os.path.relpath(disk, os.path.dirname(SRC)).replace(os.sep, "/"), disk))
    return out


class _Wheel:
    def __init__(self, path: str) -> None:
        self.zip = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED)
        self.records: list[str] = []

    def add(self, arcname: str, data: bytes) -> None:
        info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = 0o644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.records.append(f"{arcname},sha256={digest},{len(data)}")

    def close(self, dist_info: str) -> None:
        record = f"{dist_info}/RECORD"
        self.records.append(f"{record},,")
        self.zip.writestr(zipfile.ZipInfo(record, date_time=(2020, 1, 1, 0, 0, 0)), "\n".join(self.records) + "\n")
        self.zip.close()


def _wheel_meta() -> bytes:
    return b"Wheel-Version: 1.0\nGenerator: kplane_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _build(wheel_directory: str, editable: bool) -> str:
    name, version = _names()
    filename = f"{name}-{version}-py3-none-any.whl"
    dist_info = _dist_info()
    wheel = _Wheel(os.path.join(wheel_directory, filename))
    if editable:
        wheel.add(f"_{name}_editable.pth", (os.path.dirname(SRC) + "\n").encode())
    else:
        for arcname, disk in _package_files():
            with open(disk, "rb") as f:
                wheel.add(arcname, f.read())
    wheel.add(f"{dist_info}/METADATA", _metadata().encode())
    wheel.add(f"{dist_info}/WHEEL", _wheel_meta())
    wheel.add(f"{dist_info}/top_level.txt", f"{name}\n".encode())
    wheel.close(dist_info)
    return filename


# -- PEP 517 ----------------------------------------------------------------


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    dist_info = _dist_info()
    path = os.path.join(metadata_directory, dist_info)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    with open(os.path.join(path, "WHEEL"), "wb") as f:
        f.write(_wheel_meta())
    return dist_info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _build(wheel_directory, editable=False)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _build(wheel_directory, editable=True)


def build_sdist(sdist_directory, config_settings=None):
    name, version = _names()
    base = f"{name}-{version}"
    filename = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for rel in ("pyproject.toml", "README.md", "build_backend/kplane_build.py"):
            tar.add(os.path.join(ROOT, rel), arcname=f"{base}/{rel}")
        for arcname, disk in _package_files():
            tar.add(disk, arcname=f"{base}/src/{arcname}")
        pkg_info = _metadata().encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size, info.mtime = len(pkg_info), int(time.time())
        tar.addfile(info, io.BytesIO(pkg_info))
    return filename
