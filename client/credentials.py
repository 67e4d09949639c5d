"""Finding the credentials for an api (and a NATS server) with no flags.

`virtstream up` writes them into its data dir (`kubeconfig`: the api's address, CA and
admin token; `credentials/nats-<user>`: NATS passwords) and records the data dir under
the api's and NATS's ports in a per-user directory (`$XDG_RUNTIME_DIR/virtstream`, else
`/tmp/virtstream-<uid>`, mode 0700). For a server URL, the first of these that names it
gives the credentials:

1. `VIRTSTREAM_TOKEN` (and `VIRTSTREAM_CA`, a CA file) from the environment;
2. the kubeconfig `VIRTSTREAM_KUBECONFIG` names, or the one in `VIRTSTREAM_DATA_DIR`;
3. the data dir recorded for the URL's port (a loopback `up` on this machine);
4. `./.virtstream/kubeconfig` and `./.virtstream-demo/kubeconfig` (the default data dirs).

A kubeconfig names the server with its scheme: `--server http://127.0.0.1:8080` for an
api serving TLS there becomes https with the recorded CA."""

from __future__ import annotations

import base64
import contextlib
import os
import ssl
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from eventstore.connect_options import ConnectOptions

LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}
DEFAULT_DATA_DIRS = (Path(".virtstream"), Path(".virtstream-demo"))


@dataclass(frozen=True)
class ApiCredentials:
    server: str
    token: str = ""
    ca_pem: str = ""  # the CA the server's certificate must chain to ("" = system CAs)
    insecure: bool = False

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def httpx_options(self) -> dict[str, Any]:
        """`base_url`, `headers` and `verify` for an httpx client of this api."""
        return {"base_url": self.server, "headers": self.headers(), "verify": self.verify()}

    def verify(self) -> ssl.SSLContext | bool:
        """httpx's `verify`: the recorded CA, else the system's."""
        if self.insecure:
            return False
        if self.ca_pem:
            return ssl.create_default_context(cadata=self.ca_pem)
        return True


def index_dir() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) / "virtstream" if runtime else Path(tempfile.gettempdir())
    return base if runtime else base / f"virtstream-{os.getuid()}"


def record(kind: str, port: int, data_dir: Path) -> Path:
    """Record that the `kind` ("api" or "nats") on `port` belongs to `data_dir`."""
    d = index_dir()
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = d / f"{kind}-{port}"
    path.write_text(str(data_dir.resolve()))
    return path


def forget(kind: str, port: int, data_dir: Path) -> None:
    path = index_dir() / f"{kind}-{port}"
    with contextlib.suppress(OSError):
        if path.read_text() == str(data_dir.resolve()):
            path.unlink()


def recorded(kind: str, port: int) -> Path | None:
    """The data dir recorded for `kind` on `port`, if the index is this user's alone."""
    d = index_dir()
    try:
        st = d.stat()
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            return None
        return Path((d / f"{kind}-{port}").read_text().strip())
    except OSError:
        return None


def _port(url: str) -> tuple[str, int]:
    parts = urlsplit(url if "://" in url else f"http://{url}")
    default = 443 if parts.scheme == "https" else 80
    return parts.hostname or "", parts.port or default


def read_kubeconfig(path: Path) -> ApiCredentials | None:
    """The current context's server, CA and token of a kubeconfig."""
    try:
        doc: Any = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(doc, dict):
        return None
    try:
        ctx_name = doc.get("current-context")
        ctx = next(c["context"] for c in doc["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == ctx["cluster"])
        users = doc.get("users") or []
        user: Any = next((u["user"] for u in users if u["name"] == ctx["user"]), {})
    except (KeyError, StopIteration, TypeError):
        return None
    ca = ""
    if data := cluster.get("certificate-authority-data"):
        ca = base64.b64decode(data).decode()
    elif file := cluster.get("certificate-authority"):
        with contextlib.suppress(OSError):
            ca = Path(file).read_text()
    token = str((user or {}).get("token") or "")
    return ApiCredentials(
        str(cluster.get("server", "")),
        token,
        ca,
        bool(cluster.get("insecure-skip-tls-verify")),
    )


def _candidates(server: str) -> list[Path]:
    out: list[Path] = []
    if path := os.environ.get("VIRTSTREAM_KUBECONFIG"):
        out.append(Path(path))
    if data_dir := os.environ.get("VIRTSTREAM_DATA_DIR"):
        out.append(Path(data_dir) / "kubeconfig")
    host, port = _port(server)
    if host in LOOPBACK and (found := recorded("api", port)) is not None:
        out.append(found / "kubeconfig")
    out.extend(d / "kubeconfig" for d in DEFAULT_DATA_DIRS)
    return out


def named_server() -> str | None:
    """The api's address a data dir names when no server is given: the kubeconfig of
    `VIRTSTREAM_KUBECONFIG`, `VIRTSTREAM_DATA_DIR`, or a default data dir here."""
    paths = [Path(p) for p in (os.environ.get("VIRTSTREAM_KUBECONFIG"),) if p]
    if data_dir := os.environ.get("VIRTSTREAM_DATA_DIR"):
        paths.append(Path(data_dir) / "kubeconfig")
    paths.extend(d / "kubeconfig" for d in DEFAULT_DATA_DIRS)
    for path in paths:
        found = read_kubeconfig(path) if path.is_file() else None
        if found is not None and found.server:
            return found.server
    return None


def for_api(server: str) -> ApiCredentials:
    """The credentials for the api at `server` (see the module's doc); none found: the
    server as given, without credentials."""
    token = os.environ.get("VIRTSTREAM_TOKEN", "")
    if token:
        ca = ""
        if ca_file := os.environ.get("VIRTSTREAM_CA"):
            with contextlib.suppress(OSError):
                ca = Path(ca_file).read_text()
        return ApiCredentials(server, token, ca)
    want = _port(server)
    for path in _candidates(server):
        found = read_kubeconfig(path)
        if found is None or _port(found.server)[1] != want[1]:
            continue
        if (_port(found.server)[0] in LOOPBACK and want[0] in LOOPBACK) or found.server == server:
            return found
    return ApiCredentials(server)


def httpx_options(server: str, wait: float = 0.0) -> dict[str, Any]:
    """`base_url`, `headers` and `verify` for an httpx client of the api at `server`;
    `wait`: seconds to wait for a starting `up` to have written its credentials."""
    creds = for_api(server)
    deadline = time.monotonic() + wait
    while not creds.token and time.monotonic() < deadline:
        time.sleep(0.1)
        creds = for_api(server)
    return creds.httpx_options()


# ----------------------------------------------------------------- NATS
def nats_password(data_dir: Path, user: str) -> str | None:
    try:
        return (data_dir / "credentials" / f"nats-{user}").read_text().strip()
    except OSError:
        return None


def nats_data_dir(url: str) -> Path | None:
    """The data dir of the `up` serving the NATS `url`: `VIRTSTREAM_DATA_DIR`, the one
    recorded for its port, or a default data dir that has NATS credentials."""
    if data_dir := os.environ.get("VIRTSTREAM_DATA_DIR"):
        return Path(data_dir)
    first = url.replace(" ", ",").split(",")[0]
    host, port = _port(first.replace("nats://", "http://").replace("tls://", "http://"))
    if host in LOOPBACK and (found := recorded("nats", port)) is not None:
        return found
    return next((d for d in DEFAULT_DATA_DIRS if (d / "credentials").is_dir()), None)


def nats_auth(url: str, user: str = "reader") -> ConnectOptions | None:
    """The NATS credentials of `user` for the server at `url`: None when the environment
    has them (the connection reads it) or no data dir is known."""
    if ConnectOptions.from_env().given:
        return None
    data_dir = nats_data_dir(url)
    password = nats_password(data_dir, user) if data_dir else None
    if data_dir is None or password is None:
        return None
    ca = data_dir / "pki" / "ca.crt"
    tls = url.startswith("tls://") and ca.exists()
    return ConnectOptions(user=user, password=password, tls_ca=str(ca) if tls else "")


def nats_options(url: str, user: str = "reader") -> dict[str, Any]:
    """nats-py's connect options for `user` at `url` (none found: {})."""
    found = nats_auth(url, user)
    return found.nats_kwargs() if found else {}
