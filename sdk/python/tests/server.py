"""Starts the real kplane binary for the SDK tests: a temp data directory,
a free loopback port, stopped (and its data removed) even when a test
fails."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


class MissingBinaryError(RuntimeError):
    """The binary under test is not given: the tests fail rather than skip,
    so that a run without it cannot pass."""


def binary() -> str:
    """$KPLANE_BINARY, the binary under test (``make test-sdk`` sets it)."""
    path = os.environ.get("KPLANE_BINARY")
    if not path:
        raise MissingBinaryError("KPLANE_BINARY is not set: run these tests with 'make test-sdk' (or 'make test')")
    if not os.access(path, os.X_OK):
        raise MissingBinaryError(f"KPLANE_BINARY={path} is not an executable file: run 'make build'")
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    # The server must not outlive the test process, however it ends.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    os.setpgrp()


class Server:
    """One running ``kplane server``."""

    def __init__(self) -> None:
        self.data_dir = tempfile.mkdtemp(prefix="kplane-sdk-")
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.log_path = os.path.join(self.data_dir, "server.log")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def kubeconfig(self) -> str:
        return os.path.join(self.data_dir, "admin.kubeconfig")

    @property
    def ca_file(self) -> str:
        return self._ca_file

    def start(self, timeout: float = 60.0) -> None:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [binary(), "server", "--data-dir", self.data_dir, "--bind-address", "127.0.0.1", "--https-port", str(self.port)],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        log.close()
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kplane exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/readyz", context=ctx, timeout=2) as resp:
                    if resp.read() == b"ok" and os.path.exists(self.kubeconfig):
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"kplane not ready after {timeout}s:\n{self.log_tail()}")
            time.sleep(0.1)
        self.token = self._admin_token()
        self._ca_file = os.path.join(self.data_dir, "sdk-test-ca.crt")
        with open(self._ca_file, "w") as f:
            f.write(self._ca_pem())

    def _admin_token(self) -> str:
        with open(self.kubeconfig) as f:
            for line in f:
                line = line.strip()
                if line.startswith("token:"):
                    return line.split(":", 1)[1].strip()
        raise RuntimeError("no token in the admin kubeconfig")

    def _ca_pem(self) -> str:
        import base64

        with open(self.kubeconfig) as f:
            for line in f:
                line = line.strip()
                if line.startswith("certificate-authority-data:"):
                    return base64.b64decode(line.split(":", 1)[1].strip()).decode()
        raise RuntimeError("no CA in the admin kubeconfig")

    def kubeconfig_for(self, plane: str) -> str:
        """``kplane kubeconfig <plane>``, written next to the data."""
        out = subprocess.run(
            [binary(), "kubeconfig", "--data-dir", self.data_dir, plane], check=True, capture_output=True
        ).stdout
        path = os.path.join(self.data_dir, f"{plane}.kubeconfig")
        with open(path, "wb") as f:
            f.write(out)
        return path

    def log_tail(self, n: int = 60) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.data_dir, ignore_errors=True)


def start_for_module(register_cleanup) -> Server:
    """Start a server whose stop is registered with ``register_cleanup``
    (``unittest.addModuleCleanup``) before anything can fail."""
    server = Server()
    register_cleanup(server.stop)
    server.start()
    return server
