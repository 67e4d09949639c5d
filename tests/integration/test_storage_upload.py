"""CDI's uploads on `virtstream up` (test mode, real qemu-img): `virtstream image-upload dv`
makes the DataVolume, waits for UploadReady, asks a token, sends a raw image with a
progress line and sees it Succeeded; the claim's disk holds the bytes at the claim's size,
with CDI's annotations and Events. The upload proxy takes only a valid token for the
claim: none is 400, a forged one 401, and neither writes anything; a qcow2 sent to the
synchronous path with its token is answered once the claim holds it. An image qemu-img
cannot read fails the DataVolume with qemu-img's reason (UploadFailed, no disk). A failure
of the command is one line and exit 1."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from client import credentials
from ops.supervisor import importable
from tests.conftest import REPO
from tests.integration.polling import until
from tests.integration.test_kubectl import Cluster
from tests.integration.up_process import running_up

pytestmark = pytest.mark.skipif(
    not (importable("services.api") and importable("services.handler"))
    or shutil.which("qemu-img") is None,
    reason="api, controller, handlers and qemu-img are needed",
)
MARK = b"virtstream-uploaded-disk\n"
TOKENS = "/apis/upload.cdi.kubevirt.io/v1beta1/namespaces/default/uploadtokenrequests"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_up("vs-upload-", 1) as up:
        yield Cluster(up.url, up.http, up.data_dir / "kubeconfig", up.data_dir)


def _get(cluster: Cluster, *args: str) -> Any:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").out)


def _cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VIRTSTREAM_KUBECONFIG": str(cluster.kubeconfig)}
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "-s", cluster.url, *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _raw(disk: Path, tmp: Path) -> bytes:
    out = tmp / f"{disk.stem}.raw"
    subprocess.run(["qemu-img", "convert", "-O", "raw", str(disk), str(out)], check=True)
    return out.read_bytes()


def _info(disk: Path) -> dict[str, Any]:
    done = subprocess.run(
        ["qemu-img", "info", "--output=json", str(disk)], capture_output=True, check=True
    )
    info: dict[str, Any] = json.loads(done.stdout)
    return info


def _disk(cluster: Cluster, name: str) -> Path:
    return cluster.home / "disks" / "volumes" / "default" / f"{name}.qcow2"


def _uploaded(
    cluster: Cluster, tmp_path: Path, target: str, name: str, size: str, mib: int
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """`image-upload` of a new image (MARK, then `mib` random MiB) into a new target."""
    image = tmp_path / "disk.img"
    image.write_bytes(MARK + os.urandom(mib << 20))
    done = _cli(cluster, "image-upload", target, name, f"--size={size}", f"--image-path={image}")
    assert done.returncode == 0, done.stdout + done.stderr
    return image, done


def test_image_upload_fills_a_new_data_volume(cluster: Cluster, tmp_path: Path) -> None:
    image, done = _uploaded(cluster, tmp_path, "dv", "uploaded", "64Mi", 3)
    assert "DataVolume default/uploaded created" in done.stdout
    assert "Pod now ready" in done.stdout
    assert f"{3 * (1 << 20) + len(MARK)} / {3 * (1 << 20) + len(MARK)} bytes [100.0%]" in (
        done.stdout
    )
    assert f"Uploading {image} completed successfully" in done.stdout
    dv = _get(cluster, "dv", "uploaded")
    assert dv["spec"]["source"] == {"upload": {}}
    assert dv["status"]["phase"] == "Succeeded"
    conditions = {
        c["type"]: (c["status"], c["reason"], c["message"]) for c in dv["status"]["conditions"]
    }
    assert conditions["Bound"][:2] == ("True", "Bound")
    assert conditions["Ready"][0] == "True"
    assert conditions["Running"] == ("False", "Completed", "Upload Complete")
    notes = _get(cluster, "pvc", "uploaded")["metadata"]["annotations"]
    assert notes["cdi.kubevirt.io/storage.upload.target"] == ""
    assert notes["cdi.kubevirt.io/storage.pod.phase"] == "Succeeded"
    assert notes["cdi.kubevirt.io/storage.pod.ready"] == "false"
    assert notes["cdi.kubevirt.io/storage.condition.running.message"] == "Upload Complete"
    disk = _disk(cluster, "uploaded")
    info = _info(disk)
    assert info["format"] == "qcow2" and info["virtual-size"] == 64 << 20
    assert _raw(disk, tmp_path)[: len(MARK) + (3 << 20)] == image.read_bytes()
    events = _get(cluster, "events", "--field-selector", "involvedObject.name=uploaded")
    by_reason = {e["reason"]: e["message"] for e in events["items"]}
    assert by_reason["UploadScheduled"] == "Upload into uploaded scheduled"
    assert by_reason["UploadReady"] == "Upload into uploaded ready"
    assert by_reason["UploadSucceeded"] == "Successfully uploaded into uploaded"
    assert list((cluster.home / "disks" / "uploads" / "default").iterdir()) == []
    # done: a second upload into it is refused, in CDI's words, and one line
    again = _cli(cluster, "image-upload", "dv", "uploaded", "--no-create",
                 f"--image-path={image}")  # fmt: skip
    assert again.returncode == 1
    assert again.stderr.strip() == "error: PVC uploaded already successfully uploaded"


def _upload_ready(cluster: Cluster, tmp: Path, name: str) -> None:
    dv = {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": name},
        "spec": {
            "source": {"upload": {}},
            "storage": {"resources": {"requests": {"storage": "32Mi"}}},
        },
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(dv))
    cluster.kubectl("apply", "-f", str(path))
    until(lambda: _get(cluster, "dv", name)["status"].get("phase") == "UploadReady", 60,
          f"{name} UploadReady")  # fmt: skip


def test_the_proxy_takes_only_a_valid_token_for_the_claim(cluster: Cluster, tmp_path: Path) -> None:
    _upload_ready(cluster, tmp_path, "guarded")
    options = credentials.httpx_options(cluster.url)
    proxy = httpx.Client(base_url=cluster.url, verify=options["verify"])  # no user token
    body = MARK + bytes(1 << 20)
    missing = proxy.post("/v1beta1/upload-async", content=body)
    assert missing.status_code == 400
    request = {
        "apiVersion": "upload.cdi.kubevirt.io/v1beta1",
        "kind": "UploadTokenRequest",
        "metadata": {"name": "upload-guarded"},
        "spec": {"pvcName": "guarded"},
    }
    (tmp_path / "token.yaml").write_text(yaml.safe_dump(request))
    made = cluster.kubectl("create", "-f", str(tmp_path / "token.yaml"), "-o", "json")
    granted = json.loads(made.out)
    assert granted["kind"] == "UploadTokenRequest"
    assert granted["metadata"]["namespace"] == "default"
    token = granted["status"]["token"]
    forged_body, _, signature = token.partition(".")
    other = cluster.http.post(TOKENS, json={"spec": {"pvcName": "uploaded"}}).json()
    forged = f"{other['status']['token'].partition('.')[0]}.{signature}"
    flipped = ("A" if signature[0] != "A" else "B") + signature[1:]  # another first byte
    for bad in ("nonsense", forged, f"{forged_body}.{flipped}"):
        refused = proxy.post("/v1beta1/upload", content=body,
                             headers={"Authorization": f"Bearer {bad}"})  # fmt: skip
        assert refused.status_code == 401, (bad, token, refused.text)
        assert refused.json()["reason"] == "Unauthorized"
    # nothing changed: still waiting, nothing staged, no disk
    assert _get(cluster, "dv", "guarded")["status"]["phase"] == "UploadReady"
    staged = cluster.home / "disks" / "uploads" / "default"
    assert not staged.exists() or list(staged.iterdir()) == []
    assert not _disk(cluster, "guarded").exists()
    # a user token is no upload token either
    user = cluster.http.headers["Authorization"]
    as_user = proxy.post("/v1beta1/upload", content=body, headers={"Authorization": user})
    assert as_user.status_code == 401
    # the token of the claim: a qcow2 on the synchronous path, answered once it is in
    qcow2 = tmp_path / "disk.qcow2"
    raw = tmp_path / "src.raw"
    raw.write_bytes(body)
    subprocess.run(["qemu-img", "convert", "-O", "qcow2", str(raw), str(qcow2)], check=True)
    done = proxy.post("/v1beta1/upload", content=qcow2.read_bytes(),
                      headers={"Authorization": f"Bearer {token}"}, timeout=60)  # fmt: skip
    assert done.status_code == 200, done.text
    assert _get(cluster, "dv", "guarded")["status"]["phase"] == "Succeeded"
    assert _raw(_disk(cluster, "guarded"), tmp_path)[: len(body)] == body
    assert _info(_disk(cluster, "guarded"))["virtual-size"] == 32 << 20


def test_a_failed_upload_command_is_one_line(cluster: Cluster, tmp_path: Path) -> None:
    image = tmp_path / "disk.img"
    image.write_bytes(MARK)
    done = _cli(cluster, "image-upload", "dv", "nowhere", "--no-create",
                f"--image-path={image}")  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip() == 'error: datavolumes.cdi.kubevirt.io "nowhere" not found'
    done = _cli(cluster, "image-upload", "dv", "nowhere", "--size=1Gi",
                f"--image-path={tmp_path / 'absent.img'}")  # fmt: skip
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1
    assert "failed to open image file" in done.stderr


def test_an_image_qemu_img_cannot_read_fails_the_data_volume(
    cluster: Cluster, tmp_path: Path
) -> None:
    image = tmp_path / "broken.qcow2"  # a qcow2 header, then noise
    image.write_bytes(b"QFI\xfb" + (3).to_bytes(4, "big") + os.urandom(4096))
    done = _cli(cluster, "image-upload", "dv", "broken", "--size=64Mi",
                f"--image-path={image}")  # fmt: skip
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: DataVolume default/broken failed: qemu-img convert failed:")
    dv = _get(cluster, "dv", "broken")
    assert dv["status"]["phase"] == "Failed"
    running = next(c for c in dv["status"]["conditions"] if c["type"] == "Running")
    assert running["reason"] == "Error" and "qemu-img convert failed" in running["message"]
    notes = _get(cluster, "pvc", "broken")["metadata"]["annotations"]
    assert notes["cdi.kubevirt.io/storage.pod.phase"] == "Failed"
    events = _get(cluster, "events", "--field-selector", "involvedObject.name=broken")
    failed = [e for e in events["items"] if e["reason"] == "UploadFailed"]
    assert failed and failed[0]["type"] == "Warning"
    assert failed[0]["message"].startswith("Upload into broken failed: qemu-img convert failed")
    assert not _disk(cluster, "broken").exists()
    assert list((cluster.home / "disks" / "uploads" / "default").iterdir()) == []


def test_image_upload_fills_a_new_bare_claim(cluster: Cluster, tmp_path: Path) -> None:
    image, done = _uploaded(cluster, tmp_path, "pvc", "bare", "16Mi", 1)
    assert "PersistentVolumeClaim default/bare created" in done.stdout
    assert f"Uploading {image} completed successfully" in done.stdout
    pvc = _get(cluster, "pvc", "bare")
    assert pvc["status"]["phase"] == "Bound"
    notes = pvc["metadata"]["annotations"]
    assert notes["cdi.kubevirt.io/storage.upload.target"] == ""
    assert notes["cdi.kubevirt.io/storage.pod.phase"] == "Succeeded"
    assert notes["cdi.kubevirt.io/storage.pod.ready"] == "false"
    assert notes["cdi.kubevirt.io/storage.uploadPodName"] == "cdi-upload-bare"
    disk = _disk(cluster, "bare")
    assert _info(disk)["virtual-size"] == 16 << 20
    assert _raw(disk, tmp_path)[: len(MARK) + (1 << 20)] == image.read_bytes()
    events = _get(cluster, "events", "--field-selector", "involvedObject.name=bare")
    succeeded = [e for e in events["items"] if e["reason"] == "UploadSucceeded"]
    assert succeeded and succeeded[0]["message"] == "Upload Successful"
    assert succeeded[0]["involvedObject"]["kind"] == "PersistentVolumeClaim"
    assert "No DataVolume" not in done.stdout
    assert cluster.kubectl("get", "dv", "bare", check=False).code != 0  # none was made
