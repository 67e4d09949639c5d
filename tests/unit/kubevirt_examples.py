"""Locates KubeVirt's example manifests: the repo copy first, ../shared as a fallback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from events.manifest import yaml_documents

REPO_ROOT = Path(__file__).resolve().parents[2]
CANDIDATES = (
    REPO_ROOT / "examples" / "kubevirt",
    REPO_ROOT.parent / "shared" / "kubevirt-examples",
)


def examples_dir() -> Path:
    for candidate in CANDIDATES:
        if any(candidate.glob("*.yaml")):
            return candidate
    raise FileNotFoundError(f"no KubeVirt examples in {CANDIDATES}")


def example_documents() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted(examples_dir().glob("*.yaml")):
        docs += [(path.name, doc) for doc in yaml_documents(path.read_text())]
    return docs
