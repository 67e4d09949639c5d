"""The CLI and the Python client against a running api (CliRunner in a worker thread, the
server in the test's event loop)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from client.api import ApiError, AsyncClient, Client
from events.objects import VirtualMachine
from tests.integration.test_api_support import RunningApi
from tests.unit.kubevirt_examples import examples_dir

VM_YAML = """
apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: {name}
spec:
  runStrategy: {strategy}
  template:
    spec:
      domain:
        memory:
          guest: 64Mi
"""


async def cli(api: RunningApi, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    runner = CliRunner()
    result = await asyncio.to_thread(runner.invoke, app, ["--server", api.url, *args], input=stdin)
    return result.exit_code, result.stdout, result.stderr


async def test_apply_get_and_errors(api: RunningApi, tmp_path: Path) -> None:
    f = tmp_path / "vms.yaml"
    f.write_text(
        VM_YAML.format(name="a", strategy="Manual")
        + "---"
        + VM_YAML.format(name="b", strategy="Halted")
    )
    code, out, _ = await cli(api, "apply", "-f", str(f))
    assert code == 0, out
    assert "virtualmachine.kubevirt.io/a created" in out
    code, out, _ = await cli(api, "apply", "-f", str(f))
    assert code == 0 and "virtualmachine.kubevirt.io/a unchanged" in out
    code, out, _ = await cli(
        api, "create", "-f", "-", stdin=VM_YAML.format(name="c", strategy="Manual")
    )
    assert code == 0 and "virtualmachine.kubevirt.io/c created" in out
    code, out, err = await cli(api, "create", "-f", str(f))
    assert code == 1
    assert (
        'Error from server (AlreadyExists): virtualmachines.kubevirt.io "a" already exists' in err
    )
    code, out, _ = await cli(api, "get", "vms")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "AGE", "STATUS", "READY"]
    assert [line.split()[0] for line in lines[1:]] == ["a", "b", "c"]
    assert lines[1].split()[2:] == ["Stopped", "False"]
    code, out, _ = await cli(api, "get", "vm", "a", "-o", "yaml")
    assert code == 0 and "name: a" in out and "printableStatus: Stopped" in out
    code, out, _ = await cli(api, "get", "vms", "-A")
    assert out.splitlines()[0].split()[0] == "NAMESPACE"
    code, _, err = await cli(api, "stop", "a")
    assert code == 1
    assert "Error from server (Conflict):" in err and "VM is not running" in err
    code, out, _ = await cli(api, "start", "a")
    assert code == 0 and "VM a was scheduled to start" in out
    code, _, err = await cli(api, "start", "a")
    assert code == 1 and "stop/start already underway" in err
    code, out, _ = await cli(api, "delete", "vm", "c")
    assert code == 0 and 'virtualmachine.kubevirt.io "c" deleted' in out
    code, _, err = await cli(api, "get", "vm", "c")
    assert code == 1 and "(NotFound)" in err


async def test_namespaces(api: RunningApi, tmp_path: Path) -> None:
    code, out, _ = await cli(api, "get", "ns")
    assert code == 0
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == ["NAME", "STATUS", "AGE"]
    names = ["default", "kube-node-lease", "kube-public", "kube-system", "kubevirt"]
    assert [r[0] for r in rows[1:]] == names and {r[1] for r in rows[1:]} == {"Active"}
    code, out, _ = await cli(api, "create", "namespace", "dev")
    assert (code, out.strip()) == (0, "namespace/dev created")
    code, _, err = await cli(api, "create", "ns", "dev")
    assert code == 1
    assert err.strip() == 'Error from server (AlreadyExists): namespaces "dev" already exists'
    f = tmp_path / "vm.yaml"
    f.write_text(VM_YAML.format(name="a", strategy="Halted"))
    code, _, err = await cli(api, "apply", "-n", "nowhere", "-f", str(f))
    assert code == 1
    assert err.strip() == 'Error from server (NotFound): namespaces "nowhere" not found'
    code, out, _ = await cli(api, "apply", "-n", "dev", "-f", str(f))
    assert code == 0 and "virtualmachine.kubevirt.io/a created" in out
    code, out, _ = await cli(api, "delete", "ns", "dev")
    assert (code, out.strip()) == (0, 'namespace "dev" deleted')
    code, out, _ = await cli(api, "get", "ns", "dev")
    assert code == 0 and out.splitlines()[1].split()[:2] == ["dev", "Terminating"]
    code, _, err = await cli(api, "delete", "namespace", "default")
    assert code == 1
    assert err.strip() == (
        'Error from server (Forbidden): namespaces "default" is forbidden: '
        "this namespace may not be deleted"
    )


async def test_apply_examples_directory(api: RunningApi) -> None:
    docs_dir = examples_dir()
    # no handlers here: the migration does not wait for its VMI to run (--timeout 0)
    code, out, err = await cli(api, "apply", "-f", str(docs_dir), "--timeout", "0")
    assert code == 0, err
    assert "virtualmachine.kubevirt.io/vm-cirros created" in out
    assert "virtualmachineinstance.kubevirt.io/vmi-fedora created" in out
    # the migration goes after the VMI it names, whatever the files' order
    assert (
        out.splitlines()[-1] == "virtualmachineinstancemigration.kubevirt.io/migration-job created"
    )


async def test_nodes_table_and_cordon(api: RunningApi) -> None:
    from events.catalog import NodeJoined, Resources
    from events.meta import Kind
    from tests.factories import meta

    ack = await api.store.append(
        NodeJoined(
            meta=meta(Kind.NODE, "node-1", "_"),
            node="node-1",
            capacity=Resources(cpu_millis=4000, memory_bytes=8 << 30),
        )
    )
    await api.runner.wait_for(ack.seq)
    code, out, _ = await cli(api, "cordon", "node-1")
    assert code == 0 and "node/node-1 cordoned" in out
    code, out, _ = await cli(api, "get", "nodes")
    header, row = out.splitlines()[:2]
    assert header.split() == ["NAME", "STATUS", "VMIS", "CPU", "MEMORY", "AGE"]
    assert row.split()[:3] == ["node-1", "Ready,SchedulingDisabled", "0"]
    code, _, err = await cli(api, "cordon", "ghost")
    assert code == 1 and 'nodes "ghost" not found' in err


async def test_python_clients(api: RunningApi) -> None:
    import yaml

    doc = yaml.safe_load(VM_YAML.format(name="py", strategy="Manual"))
    async with AsyncClient(api.url) as ac:
        created = await ac.create(doc)
        assert isinstance(created, VirtualMachine) and created.metadata.uid
        rv = created.metadata.resource_version
        with pytest.raises(ApiError) as exc:
            await ac.stop("py")
        assert exc.value.code == 409 and "VM is not running" in exc.value.status.message
        await ac.start("py")
        events = []
        async for ev_type, obj in ac.watch("vms", resource_version=rv):
            events.append((ev_type, obj["metadata"]["name"]))
            break

    def sync_part() -> list[str]:
        with Client(api.url) as c:
            vm = c.get("vm", "py")
            assert vm.status.state_change_requests[0].action == "Start"
            names = [v.metadata.name for v in c.list("vms")]
            updated = c.apply({**doc, "metadata": {"name": "py", "labels": {"x": "y"}}})
            assert updated.metadata.labels == {"x": "y"}
            seen = []
            for ev_type, _obj in c.watch("vms", resource_version=rv):
                seen.append(ev_type)
                if len(seen) == 2:
                    break
            return names + seen

    assert events == [("MODIFIED", "py")]
    results = await asyncio.to_thread(sync_part)
    assert results == ["py", "MODIFIED", "MODIFIED"]
