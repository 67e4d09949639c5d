"""A kubeconfig for the api, so kubectl and Kubernetes client libraries reach it with no
flags (`KUBECONFIG=<data dir>/kubeconfig kubectl get vms`). No credentials: the api has no
authentication yet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

NAME = "virtstream"


def render(server: str, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": NAME, "cluster": {"server": server}}],
        "users": [{"name": NAME, "user": {}}],
        "contexts": [
            {"name": NAME, "context": {"cluster": NAME, "user": NAME, "namespace": namespace}}
        ],
        "current-context": NAME,
        "preferences": {},
    }


def write(path: Path, server: str) -> Path:
    path.write_text(yaml.safe_dump(render(server), sort_keys=False))
    path.chmod(0o600)
    return path
