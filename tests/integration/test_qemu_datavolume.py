"""A VM boots in qemu mode from a claim a DataVolume imported over HTTP: the image
catalogue's Linux guest served by a local HTTP server, vm-cirros with its containerDisk
replaced by a dataVolume whose template imports that URL (CDI's http source), and a second
claim, blank, as a data disk the guest sees. Skipped without the qemu packages or root."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from services.launcher import images
from tests.integration.polling import status_of, until
from tests.integration.qemu_support import CIRROS, qemu_marks
from tests.integration.qemu_up import BOOT_TIMEOUT, SUB_VM, VMS, Cluster, running_cluster
from tests.integration.test_qemu_guests import shell

pytestmark = qemu_marks
DVS = "/apis/cdi.kubevirt.io/v1beta1/namespaces/default/datavolumes"
CLAIMS = "/api/v1/namespaces/default/persistentvolumeclaims"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_cluster("vs-qdv-") as c:
        yield c


@pytest.fixture(scope="module")
def image_url() -> Iterator[str]:
    """The catalogue's guest image, served over HTTP on loopback."""
    image = images.find_disk_image(images.default_image_dir(), "cirros-container-disk-demo")
    root = image.resolve().parent
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{image.resolve().name}"
    finally:
        server.shutdown()
        server.server_close()


def vm_on_a_data_volume(url: str) -> dict[str, Any]:
    vm = yaml.safe_load(CIRROS.read_text())
    spec = vm["spec"]["template"]["spec"]
    spec["volumes"][0] = {"name": "containerdisk", "dataVolume": {"name": "cirros-root"}}
    spec["domain"]["devices"]["disks"].append({"name": "data", "disk": {"bus": "virtio"}})
    spec["volumes"].append({"name": "data", "persistentVolumeClaim": {"claimName": "cirros-data"}})
    vm["spec"]["dataVolumeTemplates"] = [
        {
            "metadata": {"name": "cirros-root"},
            "spec": {
                "storage": {"resources": {"requests": {"storage": "1Gi"}}},
                "source": {"http": {"url": url}},
            },
        }
    ]
    return dict(vm)


def test_a_vm_boots_from_a_claim_a_data_volume_imported_over_http(
    cluster: Cluster, image_url: str
) -> None:
    http = cluster.http
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "cirros-data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "256Mi"}}},
    }
    assert http.post(CLAIMS, json=claim).is_success
    assert http.post(VMS, json=vm_on_a_data_volume(image_url)).is_success
    until(
        lambda: status_of(http, f"{DVS}/cirros-root")["phase"] == "Succeeded",
        timeout=120,
        what="the import",
    )
    disk = cluster.data_dir / "disks" / "volumes" / "default" / "cirros-root.qcow2"
    assert disk.exists()
    assert http.put(f"{SUB_VM}/vm-cirros/start", json={}).is_success
    cluster.phase("vm-cirros", "Running")
    cluster.console_shows(
        "vm-cirros",
        r"^virtstream-guest: init",  # booted from the imported disk
        r"^vm-cirros:~# ",
    )
    with cluster.console_ws("vm-cirros") as ws:
        out = shell(ws, "cat /sys/block/vda/size /sys/block/vdc/size")
    # the root disk grown to its claim's 1Gi, the data claim's 256Mi (512-byte sectors)
    assert str((1 << 30) // 512) in out and str((256 << 20) // 512) in out, out
    assert http.put(f"{SUB_VM}/vm-cirros/stop", json={}).is_success
    until(lambda: not cluster.qemus(), timeout=BOOT_TIMEOUT, what="QEMU gone")
