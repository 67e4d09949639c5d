"""A VirtualMachineExport in qemu mode (TCG): one `virtstream up --hypervisor qemu
--nodes 1`, vm-cirros with a persistentVolumeClaim disk (/dev/vdc) the guest writes a
marker to. While the VM runs the export is Pending; once it is stopped, the user guide's
Secret and export (`kubectl create -f`) turn Ready and the raw image downloads with the
token (the guest's bytes at their offset, the claim's full size) and is refused without
it or with a wrong one (the user's own credentials are no token); the gzip format and the
generated token Secret of an export that names none; the `all` manifest is the VM.

Skipped without the qemu packages or root."""

from __future__ import annotations

import base64
import os
import subprocess
import zlib
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.polling import until
from tests.integration.qemu_support import qemu_marks
from tests.integration.qemu_up import SUB_VM, VMS, Cluster, running_cluster
from tests.integration.test_kubectl import KUBECTL
from tests.integration.test_kubectl_clone import EXPORT_GUIDE
from tests.integration.test_qemu_snapshots import (
    CLAIMS,
    TOKEN,
    booted,
    data_claim,
    vm_with_claim,
)

pytestmark = qemu_marks

EXPORTS = "/apis/export.kubevirt.io/v1beta1/namespaces/default/virtualmachineexports"
SECRETS = "/api/v1/namespaces/default/secrets"
HEADER = "x-kubevirt-export-token"
# the user guide's token Secret and export, of the VM this module boots
USER_GUIDE = EXPORT_GUIDE.replace("name: example-vm", "name: vm-cirros")
GIB = 1 << 30


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_cluster("vs-qx-", nodes=1) as c:
        yield c


def kubectl(cluster: Cluster, *args: str) -> str:
    env = {**os.environ, "KUBECONFIG": str(cluster.data_dir / "kubeconfig")}
    done = subprocess.run(
        [KUBECTL, *args], env=env, capture_output=True, text=True, timeout=90, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def export(cluster: Cluster, name: str) -> dict[str, Any]:
    return dict(cluster.http.get(f"{EXPORTS}/{name}").json())


def url(ex: dict[str, Any], fmt: str) -> str:
    [volume] = ex["status"]["links"]["external"]["volumes"]
    assert volume["name"] == "data-pvc"
    return next(f["url"] for f in volume["formats"] if f["format"] == fmt)


def test_an_export_downloads_the_stopped_vms_disk_with_its_token(cluster: Cluster) -> None:
    http = cluster.http
    assert http.post(CLAIMS, json=data_claim()).is_success
    assert http.post(VMS, json=vm_with_claim()).is_success
    assert http.put(f"{SUB_VM}/vm-cirros/start", json={}).is_success
    guest = booted(cluster)
    guest.write("A")
    assert until(guest.read, timeout=30, what="marker A") == "A"

    (cluster.data_dir / "export.yaml").write_text(USER_GUIDE)
    out = kubectl(cluster, "create", "-f", str(cluster.data_dir / "export.yaml"))
    assert "virtualmachineexport.export.kubevirt.io/example-export created" in out
    until(lambda: export(cluster, "example-export").get("status", {}).get("phase") == "Pending",
          what="the export Pending while the VM runs")  # fmt: skip
    [ready] = export(cluster, "example-export")["status"]["conditions"]
    assert (ready["reason"], ready["message"]) == (
        "InUse",
        "Virtual Machine default/vm-cirros is running",
    )

    assert http.put(f"{SUB_VM}/vm-cirros/stop", json={}).is_success
    until(lambda: export(cluster, "example-export")["status"]["phase"] == "Ready", timeout=90,
          what="the export Ready")  # fmt: skip
    ex = export(cluster, "example-export")
    assert ex["status"]["tokenSecretRef"] == "example-token"
    raw_url = url(ex, "raw")
    assert raw_url.endswith(
        "/api/export.kubevirt.io/v1/namespaces/default/virtualmachineexports/"
        "example-export/volumes/data-pvc/disk.img"
    )
    rows = kubectl(cluster, "get", "vmexport").splitlines()
    assert rows[1].split()[:4] == ["example-export", "VirtualMachine", "vm-cirros", "Ready"]

    # refused without the token (the user's credentials are none) and with a wrong one
    assert http.get(raw_url).status_code == 401
    assert http.get(raw_url, headers={HEADER: "1234567890ac"}).status_code == 401

    size, marker = 0, b""
    with http.stream("GET", raw_url, headers={HEADER: "1234567890ab"}, timeout=120) as r:
        assert r.status_code == 200
        for chunk in r.iter_bytes():
            if size <= 8 * 512 < size + len(chunk) or (marker and len(marker) < 512):
                start = max(0, 8 * 512 - size)
                marker += chunk[start : start + 512 - len(marker)]
            size += len(chunk)
    assert size == GIB  # the claim's full raw size
    assert f"MARK-A-{TOKEN}".encode() in marker

    manifests = ex["status"]["links"]["external"]["manifests"]
    all_url = next(m["url"] for m in manifests if m["type"] == "all")
    listed = http.get(all_url, params={HEADER: "1234567890ab"}).json()
    assert [(i["kind"], i["metadata"]["name"]) for i in listed["items"]] == [
        ("VirtualMachine", "vm-cirros")
    ]


def test_an_export_without_a_token_secret_gets_one_and_serves_gzip(cluster: Cluster) -> None:
    http = cluster.http
    body = {
        "apiVersion": "export.kubevirt.io/v1beta1",
        "kind": "VirtualMachineExport",
        "metadata": {"name": "gz-export"},
        "spec": {"source": {"apiGroup": "", "kind": "PersistentVolumeClaim", "name": "data-pvc"}},
    }
    assert http.post(EXPORTS, json=body).is_success
    until(lambda: export(cluster, "gz-export").get("status", {}).get("phase") == "Ready",
          what="the export Ready")  # fmt: skip
    ex = export(cluster, "gz-export")
    assert ex["status"]["tokenSecretRef"] == "export-token-gz-export"
    secret = http.get(f"{SECRETS}/export-token-gz-export").json()
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert len(token) == 32
    unpacker = zlib.decompressobj(31)
    plain = b""
    with http.stream("GET", url(ex, "gzip"), params={HEADER: token}, timeout=120) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("application/gzip")
        for chunk in r.iter_bytes():
            plain += unpacker.decompress(chunk)
            if len(plain) >= 8 * 512 + 512:
                break
    assert f"MARK-A-{TOKEN}".encode() in plain[8 * 512 : 9 * 512]
