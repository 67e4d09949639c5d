"""A kubeconfig for the api, so kubectl and Kubernetes client libraries reach it with no
flags (`KUBECONFIG=<data dir>/kubeconfig kubectl get vms`): the server, the CA its
certificate chains to (embedded), and the admin's token."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

NAME = "virtstream"


def render(
    server: str, namespace: str = "default", *, token: str = "", ca_pem: bytes = b""
) -> dict[str, Any]:
    cluster: dict[str, Any] = {"server": server}
    if ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    user: dict[str, Any] = {"token": token} if token else {}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": NAME, "cluster": cluster}],
        "users": [{"name": NAME, "user": user}],
        "contexts": [
            {"name": NAME, "context": {"cluster": NAME, "user": NAME, "namespace": namespace}}
        ],
        "current-context": NAME,
        "preferences": {},
    }


def write(path: Path, server: str, *, token: str = "", ca_pem: bytes = b"") -> Path:
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(yaml.safe_dump(render(server, token=token, ca_pem=ca_pem), sort_keys=False))
    return path
