"""Reading kubeconfig files without third-party packages.

A kubeconfig is JSON or YAML. JSON is read with :mod:`json`; YAML with
PyYAML when it is installed, else with a small reader of the block-style
subset that kubectl, client-go and ``kplane kubeconfig`` write (mappings,
sequences, plain and quoted scalars). Anchors, flow collections other than
``{}``/``[]`` and multi-line scalars are refused with a clear error.
"""

from __future__ import annotations

import base64
import json
import os
import re
import tempfile
from dataclasses import dataclass
from typing import Any

__all__ = ["KubeconfigError", "Credentials", "load", "resolve"]


class KubeconfigError(ValueError):
    """The kubeconfig cannot be read or does not say how to reach a server."""


@dataclass
class Credentials:
    """What a kubeconfig context says about reaching a server."""

    server: str
    token: str | None = None
    verify_tls: bool = True
    ca_file: str | None = None
    ca_data: str | None = None
    client_cert_file: str | None = None
    client_key_file: str | None = None
    plane: str | None = None


_PLANE_SUFFIX = re.compile(r"^(?P<base>.*?)/clusters/(?P<plane>[^/]+)/control-plane/?$")


def load(path: str) -> dict[str, Any]:
    """Parse the kubeconfig at ``path``."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise KubeconfigError(f"reading kubeconfig {path}: {e}") from e
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as e:
            raise KubeconfigError(f"kubeconfig {path}: {e}") from e
    else:
        data = _parse_yaml(text, path)
    if not isinstance(data, dict):
        raise KubeconfigError(f"kubeconfig {path}: not a mapping")
    return data


def resolve(path: str | None = None, context: str | None = None) -> Credentials:
    """The server and credentials of ``context`` (default: the current
    context) in the kubeconfig at ``path`` (default: the first file of
    ``$KUBECONFIG``, else ``~/.kube/config``).

    A server URL of a plane (``.../clusters/<id>/control-plane``) is cut
    back to the server's URL; the plane id is kept in ``plane``."""
    if path is None:
        env = os.environ.get("KUBECONFIG", "")
        path = env.split(os.pathsep)[0] if env else os.path.join(os.path.expanduser("~"), ".kube", "config")
    cfg = load(path)
    base_dir = os.path.dirname(os.path.abspath(path))
    name = context or cfg.get("current-context")
    if not name:
        raise KubeconfigError(f"kubeconfig {path}: no context given and no current-context")
    ctx = _named(cfg, "contexts", "context", name, path)
    cluster = _named(cfg, "clusters", "cluster", ctx.get("cluster"), path)
    user = _named(cfg, "users", "user", ctx.get("user"), path) if ctx.get("user") else {}

    server = str(cluster.get("server") or "")
    if not server:
        raise KubeconfigError(f"kubeconfig {path}: cluster {ctx.get('cluster')!r} has no server")
    plane = None
    m = _PLANE_SUFFIX.match(server)
    if m:
        server, plane = m.group("base"), m.group("plane")

    creds = Credentials(server=server.rstrip("/"), plane=plane)
    creds.verify_tls = not bool(cluster.get("insecure-skip-tls-verify"))
    if cluster.get("certificate-authority-data"):
        creds.ca_data = _b64(cluster["certificate-authority-data"], path)
    elif cluster.get("certificate-authority"):
        creds.ca_file = _rel(base_dir, cluster["certificate-authority"])
    for unsupported in ("exec", "auth-provider"):
        if user.get(unsupported) and not (user.get("token") or user.get("tokenFile") or user.get("client-certificate") or user.get("client-certificate-data")):
            raise KubeconfigError(
                f"kubeconfig {path}: user {ctx.get('user')!r} authenticates with {unsupported}, which this SDK does not run; "
                "pass Client(url, token=...) instead"
            )
    if user.get("token"):
        creds.token = str(user["token"])
    elif user.get("tokenFile"):
        with open(_rel(base_dir, user["tokenFile"]), encoding="utf-8") as f:
            creds.token = f.read().strip()
    cert = _file_or_data(user, "client-certificate", base_dir, path)
    key = _file_or_data(user, "client-key", base_dir, path)
    if cert:
        creds.client_cert_file, creds.client_key_file = cert, key
    return creds


def _named(cfg: dict[str, Any], section: str, key: str, name: Any, path: str) -> dict[str, Any]:
    for entry in cfg.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            return dict(entry.get(key) or {})
    raise KubeconfigError(f"kubeconfig {path}: no {key} named {name!r}")


def _rel(base_dir: str, p: str) -> str:
    return p if os.path.isabs(p) else os.path.join(base_dir, p)


def _b64(value: str, path: str) -> str:
    try:
        return base64.b64decode(value).decode("ascii")
    except (ValueError, UnicodeDecodeError) as e:
        raise KubeconfigError(f"kubeconfig {path}: bad base64 data: {e}") from e


def _file_or_data(user: dict[str, Any], field: str, base_dir: str, path: str) -> str | None:
    """A path to the PEM of ``field``; inline ``-data`` is written to a
    private temporary file because :mod:`ssl` loads certificates from files."""
    if user.get(field + "-data"):
        pem = _b64(user[field + "-data"], path)
        fd, tmp = tempfile.mkstemp(prefix="kplane-", suffix=".pem")
        with os.fdopen(fd, "w") as f:
            f.write(pem)
        return tmp
    if user.get(field):
        return _rel(base_dir, user[field])
    return None


# -- YAML subset -----------------------------------------------------------


def _parse_yaml(text: str, path: str) -> Any:
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        return _MiniYAML(text, path).parse()
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise KubeconfigError(f"kubeconfig {path}: {e}") from e


class _MiniYAML:
    """Block-style YAML as Kubernetes tools write it."""

    def __init__(self, text: str, path: str) -> None:
        self.path = path
        self.lines: list[tuple[int, str, int]] = []
        for number, line in enumerate(text.splitlines(), 1):
            content = line.rstrip()
            if not content.strip() or content.lstrip().startswith("#") or content.strip() in ("---", "..."):
                continue
            if "\t" in content[: len(content) - len(content.lstrip())]:
                self.fail(number, "tabs in indentation")
            self.lines.append((len(content) - len(content.lstrip(" ")), content.strip(), number))
        self.pos = 0

    def fail(self, number: int, why: str) -> None:
        raise KubeconfigError(f"kubeconfig {self.path}: line {number}: {why} (install PyYAML for full YAML)")

    def parse(self) -> Any:
        if not self.lines:
            return {}
        value = self.block(self.lines[0][0])
        if self.pos != len(self.lines):
            self.fail(self.lines[self.pos][2], "unexpected indentation")
        return value

    def block(self, indent: int) -> Any:
        _, text, _ = self.lines[self.pos]
        if text == "-" or text.startswith("- "):
            return self.sequence(indent)
        return self.mapping(indent)

    def sequence(self, indent: int) -> list[Any]:
        out: list[Any] = []
        while self.pos < len(self.lines):
            ind, text, number = self.lines[self.pos]
            if ind < indent:
                break
            if not (text == "-" or text.startswith("- ")):
                if ind == indent:
                    break  # the next key of the mapping this sequence is a value of
                self.fail(number, "expected a sequence item")
            if ind > indent:
                self.fail(number, "unexpected indentation")
            rest = text[1:].strip()
            if not rest:
                self.pos += 1
                out.append(self.block(self.lines[self.pos][0]) if self.pos < len(self.lines) and self.lines[self.pos][0] > indent else None)
                continue
            # "- key: value" opens a mapping indented past the dash.
            child = indent + 2
            if _key_value(rest) is not None:
                self.lines[self.pos] = (child, rest, number)
                out.append(self.mapping(child))
            else:
                out.append(self.scalar(rest, number))
                self.pos += 1
        return out

    def mapping(self, indent: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        while self.pos < len(self.lines):
            ind, text, number = self.lines[self.pos]
            if ind < indent:
                break
            if ind > indent:
                self.fail(number, "unexpected indentation")
            kv = _key_value(text)
            if kv is None:
                if text == "-" or text.startswith("- "):
                    break
                self.fail(number, "expected 'key: value'")
            key, rest = kv  # type: ignore[misc]
            self.pos += 1
            if rest:
                out[key] = self.scalar(rest, number)
            elif self.pos < len(self.lines) and (
                self.lines[self.pos][0] > indent
                or (self.lines[self.pos][0] == indent and self.lines[self.pos][1].startswith("-"))
            ):
                out[key] = self.block(self.lines[self.pos][0])
            else:
                out[key] = None
        return out

    def scalar(self, text: str, number: int) -> Any:
        if text[0] in "&*!|>":
            self.fail(number, "anchors, tags and block scalars are not supported")
        if text in ("{}", "[]"):
            return {} if text == "{}" else []
        if text[0] in "{[":
            self.fail(number, "flow collections are not supported")
        if text[0] == '"':
            try:
                return json.loads(_strip_comment_quoted(text, '"'))
            except ValueError:
                self.fail(number, "bad double-quoted string")
        if text[0] == "'":
            inner = _strip_comment_quoted(text, "'")
            return inner[1:-1].replace("''", "'")
        text = re.split(r"\s+#", text, maxsplit=1)[0].strip()
        if text in ("true", "True", "TRUE"):
            return True
        if text in ("false", "False", "FALSE"):
            return False
        if text in ("null", "Null", "NULL", "~"):
            return None
        if re.fullmatch(r"[-+]?\d+", text):
            return int(text)
        return text


def _strip_comment_quoted(text: str, quote: str) -> str:
    """The quoted scalar at the start of ``text``, quotes included."""
    i = 1
    while i < len(text):
        if quote == '"' and text[i] == "\\":
            i += 2
            continue
        if text[i] == quote:
            if quote == "'" and i + 1 < len(text) and text[i + 1] == "'":
                i += 2
                continue
            return text[: i + 1]
        i += 1
    return text


def _key_value(text: str) -> tuple[str, str] | None:
    """Split ``key: value`` (value may be empty); None if ``text`` is not a pair."""
    if text[0] in "\"'":
        q = _strip_comment_quoted(text, text[0])
        rest = text[len(q):]
        if not rest.startswith(":"):
            return None
        key = json.loads(q) if q[0] == '"' else q[1:-1].replace("''", "'")
        return key, rest[1:].strip()
    m = re.match(r"^([^:#\s][^:]*?):(?:\s+(.*))?$", text)
    if not m:
        return None
    return m.group(1), (m.group(2) or "").strip()
