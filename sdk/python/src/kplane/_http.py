"""HTTP transport: one keep-alive connection pool per client, JSON in and
out, errors turned into :class:`kplane.ApiError`. Standard library only."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence, Union

from . import __version__
from .errors import ApiError, Status, TransportError

QueryValue = Union[str, int, bool, Sequence[str], None]

# Errors that mean a kept-alive connection was closed by the server while
# idle: the request never reached it and can be sent again on a new one.
_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)


@dataclass
class Response:
    """A complete answer."""

    status: int
    reason: str
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


class Stream:
    """An answer read as it arrives (the delta stream). Owns its connection."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        self._conn = conn
        self._resp = resp
        self.status = resp.status
        self.headers = resp.headers

    def readline(self) -> bytes:
        """The next line, b"" at the end of the stream."""
        try:
            return self._resp.readline()
        except (OSError, http.client.HTTPException, ValueError, AttributeError) as e:
            if self._resp.isclosed() or self._conn.sock is None:
                return b""
            raise TransportError(f"reading the stream: {e}") from e

    def close(self) -> None:
        """Stop reading and drop the connection (it cannot be reused mid-stream)."""
        try:
            if self._conn.sock is not None:
                self._conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._resp.close()
        self._conn.close()


class Transport:
    """Sends requests to one server, reusing connections."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        verify_tls: bool = True,
        ca_file: str | None = None,
        ca_data: str | None = None,
        client_cert_file: str | None = None,
        client_key_file: str | None = None,
        timeout: float | None = 30.0,
        max_idle: int = 32,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ValueError(f"server URL {url!r}: want https://host[:port]")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.base_path = parts.path.rstrip("/")
        self.url = f"{parts.scheme}://{parts.netloc}{self.base_path}"
        self.timeout = timeout
        self._token = token
        self._ssl: ssl.SSLContext | None = None
        if self.scheme == "https":
            ctx = ssl.create_default_context(cafile=ca_file, cadata=ca_data)
            if not verify_tls:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            if client_cert_file:
                ctx.load_cert_chain(client_cert_file, client_key_file)
            self._ssl = ctx
        self._idle: list[http.client.HTTPConnection] = []
        self._max_idle = max_idle
        self._lock = threading.Lock()
        self._closed = False
        self._user_agent = f"kplane-python/{__version__}"

    # -- connections -----------------------------------------------------

    def _new_conn(self, timeout: float | None) -> http.client.HTTPConnection:
        if self._ssl is not None:
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self._ssl)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def _get_conn(self, timeout: float | None) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._closed:
                raise TransportError("the client is closed")
            while self._idle:
                conn = self._idle.pop()
                if conn.sock is not None:
                    conn.sock.settimeout(timeout)
                    return conn, True
        return self._new_conn(timeout), False

    def _put_conn(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self._max_idle:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close every idle connection; the transport cannot be used after."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- requests --------------------------------------------------------

    def path(self, path: str, query: Mapping[str, QueryValue] | None = None) -> str:
        """The request target for ``path`` (below the server URL) and ``query``."""
        target = self.base_path + path
        q = encode_query(query)
        return f"{target}?{q}" if q else target

    def headers(self, extra: Mapping[str, str] | None = None, body: bool = False) -> dict[str, str]:
        h = {"Accept": "application/json", "User-Agent": self._user_agent}
        if self._token:
            h["Authorization"] = f"Bearer {self._token}"
        if body:
            h["Content-Type"] = "application/json"
        if extra:
            h.update(extra)
        return h

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, QueryValue] | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Response:
        """Send one request and read the whole answer. Error answers raise
        :class:`ApiError`; connection failures raise :class:`TransportError`."""
        target = self.path(path, query)
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        hdrs = self.headers(headers, body=body is not None and "Content-Type" not in (headers or {}))
        timeout = self.timeout if timeout is None else timeout
        for attempt in (0, 1):
            conn, reused = self._get_conn(timeout)
            try:
                conn.request(method, target, body=data, headers=hdrs)
                resp = conn.getresponse()
                payload = resp.read()
            except _STALE as e:
                conn.close()
                if reused and attempt == 0:
                    continue
                raise TransportError(f"{method} {self.url}{path}: {e}") from e
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise TransportError(f"{method} {self.url}{path}: {_describe(e)}") from e
            if resp.will_close:
                conn.close()
            else:
                self._put_conn(conn)
            answer = Response(resp.status, resp.reason, resp.headers, payload)
            if resp.status >= 400:
                raise ApiError.from_status(Status.from_response(resp.status, payload, resp.reason), method, path)
            return answer
        raise AssertionError("unreachable")

    def json(self, method: str, path: str, **kw: Any) -> Any:
        """:meth:`request`, decoding the answer as JSON."""
        resp = self.request(method, path, **kw)
        try:
            return resp.json()
        except ValueError as e:
            raise TransportError(f"{method} {path}: the answer is not JSON: {e}") from e

    def stream(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, QueryValue] | None = None,
        read_timeout: float | None = None,
    ) -> Stream:
        """Send a request whose answer is read incrementally; the connection
        belongs to the returned :class:`Stream`."""
        target = self.path(path, query)
        conn = self._new_conn(self.timeout)
        try:
            conn.request(method, target, headers=self.headers())
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise TransportError(f"{method} {self.url}{path}: {_describe(e)}") from e
        if resp.status >= 400:
            payload = resp.read()
            conn.close()
            raise ApiError.from_status(Status.from_response(resp.status, payload, resp.reason), method, path)
        if conn.sock is not None:
            conn.sock.settimeout(read_timeout)
        return Stream(conn, resp)


def encode_query(query: Mapping[str, QueryValue] | None) -> str:
    """URL-encode ``query``: sequences repeat the key, booleans are
    ``true``/``false``, None is left out."""
    if not query:
        return ""
    pairs: list[tuple[str, str]] = []
    for key, value in query.items():
        if value is None:
            continue
        if isinstance(value, bool):
            pairs.append((key, "true" if value else "false"))
        elif isinstance(value, (list, tuple)):
            pairs.extend((key, str(v)) for v in value)
        else:
            pairs.append((key, str(value)))
    return urllib.parse.urlencode(pairs)


def as_list(value: str | Iterable[str] | None) -> list[str] | None:
    """``"pods"`` -> ``["pods"]``; iterables are listed; None stays None."""
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    return list(value)


def _describe(e: BaseException) -> str:
    if isinstance(e, ssl.SSLCertVerificationError):
        return f"TLS verification failed ({e.verify_message}); pass ca_file= or verify_tls=False"
    if isinstance(e, socket.timeout):
        return "timed out"
    return str(e) or type(e).__name__
