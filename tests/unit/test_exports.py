"""The export controller on plain data: a stopped VM's claims are Ready with KubeVirt's
links and a generated token Secret (derived from the controller's key, owned by the
export); a running VM keeps the export Pending (InUse); a VM without claims is Skipped;
the TTL deletes the export and, by the garbage collector, its Secret; the admitter."""

from __future__ import annotations

import base64
from typing import Any

from events.catalog import ResourceCreated, VMCreated
from events.meta import Kind, ResourceKind
from events.objects import ObjectMeta, Secret, VirtualMachineExport
from kinds import export as export_kind
from projections.cluster import Cluster
from projections.views import ResourceView
from services.controller import export as ex
from tests.factories import vm_manifest
from tests.unit.test_controller_world import World

KEY = b"k" * 32
URL = "https://127.0.0.1:8443"
BASE = f"{URL}/api/export.kubevirt.io/v1/namespaces/default/virtualmachineexports/e1"


def export_manifest(name: str = "e1", source: str = "vm1", **spec: Any) -> dict[str, Any]:
    kind = spec.pop("kind", "VirtualMachine")
    group = {
        "VirtualMachine": "kubevirt.io",
        "PersistentVolumeClaim": "",
        "VirtualMachineSnapshot": "snapshot.kubevirt.io",
    }[kind]
    return {
        "apiVersion": "export.kubevirt.io/v1beta1",
        "kind": "VirtualMachineExport",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"source": {"apiGroup": group, "kind": kind, "name": source}} | spec,
    }


def world(strategy: str = "Halted", claims: bool = True) -> World:
    w = World(export_key=KEY, export_url=URL)
    w.given(w.node_joined("node-1"))
    m = vm_manifest("vm1", strategy)
    if claims:
        m["spec"]["template"]["spec"]["volumes"] = [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-pvc"}}
        ]
    w.run(VMCreated(meta=w.m(Kind.VM, "vm1"), manifest=m))
    return w


def make(w: World, **kw: Any) -> None:
    w.run(ResourceCreated(meta=w.m(ResourceKind.EXPORT, "e1"), manifest=export_manifest(**kw)))


def the_export(w: World) -> ResourceView:
    return w.state.cluster.resources[ResourceKind.EXPORT]["default/e1"]


def test_a_stopped_vms_claims_are_ready_with_kubevirts_links_and_a_token() -> None:
    w = world()
    make(w)
    e = the_export(w)
    assert e.status["phase"] == "Ready"
    assert e.status["tokenSecretRef"] == "export-token-e1"
    assert e.status["virtualMachineName"] == "vm1"
    assert [(c["type"], c["status"], c["reason"]) for c in e.status["conditions"]] == [
        ("Ready", "True", "PodReady")
    ]
    assert e.status["links"]["external"] == {
        "volumes": [
            {
                "name": "data-pvc",
                "formats": [
                    {"format": "raw", "url": f"{BASE}/volumes/data-pvc/disk.img"},
                    {"format": "gzip", "url": f"{BASE}/volumes/data-pvc/disk.img.gz"},
                ],
            }
        ],
        "manifests": [
            {"type": "all", "url": f"{BASE}/external/manifests/all"},
            {"type": "auth-header-secret", "url": f"{BASE}/external/manifests/secret"},
        ],
    }
    assert e.status["links"]["internal"]["manifests"][0]["url"].endswith("/internal/manifests/all")
    secret = w.state.cluster.resources[ResourceKind.SECRET]["default/export-token-e1"]
    token = base64.b64decode(secret.manifest["data"]["token"]).decode()
    assert token == ex.token(KEY, "uid-e1") and len(token) == 32
    assert secret.manifest["metadata"]["ownerReferences"][0]["uid"] == "uid-e1"


def test_a_named_token_secret_is_the_users() -> None:
    w = world()
    make(w, tokenSecretRef="mine")
    assert the_export(w).status["tokenSecretRef"] == "mine"
    assert w.state.cluster.resources[ResourceKind.SECRET] == {}


def test_a_running_vm_keeps_the_export_pending() -> None:
    w = world("Always")
    make(w)
    e = the_export(w)
    assert e.status["phase"] == "Pending" and "links" not in e.status
    [ready] = e.status["conditions"]
    assert (ready["reason"], ready["message"]) == (
        "InUse",
        "Virtual Machine default/vm1 is running",
    )


def test_a_vm_without_claims_is_skipped() -> None:
    w = world(claims=False)
    make(w)
    assert the_export(w).status["phase"] == "Skipped"
    assert the_export(w).status["conditions"][0]["reason"] == "VMNoVolumes"


def test_a_snapshot_exports_its_volume_backups_once_ready() -> None:
    w = world()
    snap = {
        "apiVersion": "snapshot.kubevirt.io/v1beta1",
        "kind": "VirtualMachineSnapshot",
        "metadata": {"name": "s1", "namespace": "default", "uid": "uid-s1"},
        "spec": {"source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "vm1"}},
    }
    w.run(ResourceCreated(meta=w.m(ResourceKind.SNAPSHOT, "s1"), manifest=snap))
    make(w, kind="VirtualMachineSnapshot", source="s1")
    # test mode keeps no volumes in a snapshot (docs/KINDS.md): nothing to export
    assert the_export(w).status["phase"] == "Skipped"
    assert the_export(w).status["conditions"][0]["reason"] == "VMSnapshotNoVolumes"


def test_the_ttl_ends_the_export_and_its_secret() -> None:
    w = world()
    make(w, ttlDuration="1m")
    assert the_export(w).status["ttlExpirationTime"]
    w.now += 61
    w.settle(w.tick())
    w.settle(w.tick())
    assert w.state.cluster.resources[ResourceKind.EXPORT] == {}
    assert w.state.cluster.resources[ResourceKind.SECRET] == {}


def test_redelivery_decides_nothing_new() -> None:
    w = world()
    make(w)
    before = len(w.log)
    for s in list(w.log):
        w.settle(w.react(s))
    w.now += 5
    w.settle(w.tick())
    assert len(w.log) == before


def _admit(spec: dict[str, Any]) -> list[str]:
    admit = export_kind.EXPORT.admit
    assert admit is not None
    typed = VirtualMachineExport(metadata=ObjectMeta(name="e"), spec=spec)
    return [c.message for c in admit(Cluster(), typed, "u")[1]]


def test_the_admitter_words_as_kubevirt() -> None:
    assert (
        _admit({"source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "x"}}) == []
    )
    assert _admit({"source": {"kind": "VirtualMachine", "name": "x"}}) == [
        "VM API group must be kubevirt.io"
    ]
    assert _admit({"source": {"apiGroup": "x", "kind": "PersistentVolumeClaim"}}) == [
        "PVC name must not be empty",
        "PVC API group must be missing or blank",
    ]
    assert _admit({"source": {"kind": "Pod", "name": "x"}}) == ["invalid kind"]


def test_a_secrets_string_data_is_folded_into_data() -> None:
    admit = export_kind.SECRET.admit
    assert admit is not None
    typed = Secret(metadata=ObjectMeta(name="s"), string_data={"token": "1234567890ab"})
    out, causes = admit(Cluster(), typed, "u")
    assert causes == [] and out.string_data is None
    assert out.data == {"token": base64.b64encode(b"1234567890ab").decode()}


def test_without_a_key_an_export_naming_no_secret_says_so() -> None:
    w = World(export_url=URL)
    w.given(w.node_joined("node-1"))
    w.run(VMCreated(meta=w.m(Kind.VM, "vm1"), manifest=vm_manifest("vm1", "Halted")))
    make(w)
    e = the_export(w)
    assert e.status["phase"] == "Pending"
    assert e.status["conditions"][0]["message"] == ex.NO_KEY
    assert w.state.cluster.resources[ResourceKind.SECRET] == {}
