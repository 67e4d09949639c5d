"""The api's export downloads in process, on a folded log and a real qcow2 (qemu-img): the
raw image and its gzip stream with the export's token (header or query), 401 without it
or with a wrong one, 404 for a volume the export does not serve or an export not Ready."""

from __future__ import annotations

import base64
import gzip
import shutil
import subprocess
from pathlib import Path
from typing import Any, cast

import pytest
from litestar.testing import TestClient

from events.catalog import Event, ResourceCreated, ResourceStatusChanged
from events.envelope import Stored
from events.meta import Actor, Aggregate, Meta, ResourceKind
from readside.runner import ProjectionRunner
from services.api.app import create_app
from services.api.service import ApiService

pytestmark = pytest.mark.skipif(shutil.which("qemu-img") is None, reason="needs qemu-img")
BASE = "/api/export.kubevirt.io/v1/namespaces/default/virtualmachineexports"
HEADER = "x-kubevirt-export-token"


def _meta(kind: str, name: str, seq: int) -> Meta:
    agg = Aggregate(kind=kind, namespace="default", name=name, uid=f"u-{name}")
    return Meta(
        event_id=f"e{seq}", aggregate=agg, occurred_at=1.0, correlation_id="c",
        actor=Actor(service="s"),
    )  # fmt: skip


def _export(name: str, phase: str) -> list[Event]:
    manifest = {
        "apiVersion": "export.kubevirt.io/v1beta1",
        "kind": "VirtualMachineExport",
        "metadata": {"name": name, "namespace": "default", "uid": f"u-{name}"},
        "spec": {
            "tokenSecretRef": "tok",
            "source": {"kind": "PersistentVolumeClaim", "name": "pvc1"},
        },
    }
    return [
        ResourceCreated(meta=_meta(ResourceKind.EXPORT, name, 0), manifest=manifest),
        ResourceStatusChanged(meta=_meta(ResourceKind.EXPORT, name, 0), status={"phase": phase}),
    ]


@pytest.fixture
def http(tmp_path: Path) -> Any:
    disks = tmp_path / "disks"
    (disks / "volumes/default").mkdir(parents=True)
    qcow2 = disks / "volumes/default/pvc1.qcow2"
    subprocess.run(["qemu-img", "create", "-f", "qcow2", str(qcow2), "1M"], check=True)
    raw = tmp_path / "marked.raw"
    raw.write_bytes(b"\0" * 4096 + b"MARKED" + b"\0" * (1024 * 1024 - 4102))
    subprocess.run(["qemu-img", "convert", "-O", "qcow2", str(raw), str(qcow2)], check=True)
    runner = ProjectionRunner(cast(Any, None))
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "tok", "namespace": "default", "uid": "u-tok"},
        "data": {"token": base64.b64encode(b"s3cret").decode()},
    }
    events = [
        ResourceCreated(meta=_meta(ResourceKind.SECRET, "tok", 0), manifest=secret),
        *_export("e1", "Ready"),
        *_export("waiting", "Pending"),
    ]
    for seq, ev in enumerate(events, 1):
        runner.fold(Stored(seq=seq, subject="s", time=1.0, event=ev))
    with TestClient(app=create_app(ApiService(runner, None), disk_dir=disks)) as client:
        yield client


def test_the_raw_and_gzip_images_need_the_token(http: Any) -> None:
    raw = http.get(f"{BASE}/e1/volumes/pvc1/disk.img", headers={HEADER: "s3cret"})
    assert raw.status_code == 200 and raw.headers["content-type"] == "application/octet-stream"
    assert len(raw.content) == 1024 * 1024 and raw.content[4096:4102] == b"MARKED"
    packed = http.get(f"{BASE}/e1/volumes/pvc1/disk.img.gz", params={HEADER: "s3cret"})
    assert packed.headers["content-type"] == "application/gzip"
    assert gzip.decompress(packed.content) == raw.content
    for headers in ({}, {HEADER: "s3cret!"}):
        refused = http.get(f"{BASE}/e1/volumes/pvc1/disk.img", headers=headers)
        assert (refused.status_code, refused.json()["reason"]) == (401, "Unauthorized")


def test_what_is_not_served(http: Any) -> None:
    other = http.get(f"{BASE}/e1/volumes/nope/disk.img", headers={HEADER: "s3cret"})
    assert other.status_code == 404
    assert other.json()["message"] == "volume nope is not exported by e1"
    pending = http.get(f"{BASE}/waiting/volumes/pvc1/disk.img", headers={HEADER: "s3cret"})
    assert pending.json()["message"] == "export default/waiting is not ready"


def test_the_manifests(http: Any) -> None:
    header = http.get(f"{BASE}/e1/external/manifests/secret", headers={HEADER: "s3cret"}).json()
    assert header["kind"] == "Secret"
    assert base64.b64decode(header["data"]["token"]) == b"x-kubevirt-export-token:s3cret"
    listed = http.get(f"{BASE}/e1/internal/manifests/all", headers={HEADER: "s3cret"}).json()
    assert (listed["kind"], listed["items"]) == ("List", [])  # a claim has no VM
