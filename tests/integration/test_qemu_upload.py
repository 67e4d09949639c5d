"""A VM boots in qemu mode from a claim `virtstream image-upload` filled: the catalogue's
Linux guest uploaded to a new DataVolume, then vm-cirros with its containerDisk replaced by
that DataVolume. Skipped without the qemu packages or root."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from services.launcher import images
from tests.integration.polling import status_of, until
from tests.integration.qemu_support import CIRROS, qemu_marks
from tests.integration.qemu_up import BOOT_TIMEOUT, SUB_VM, VMS, Cluster, running_cluster

pytestmark = qemu_marks
DVS = "/apis/cdi.kubevirt.io/v1beta1/namespaces/default/datavolumes"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_cluster("vs-qup-") as c:
        yield c


def test_a_vm_boots_from_an_uploaded_image(cluster: Cluster) -> None:
    image = images.find_disk_image(images.default_image_dir(), "cirros-container-disk-demo")
    done = cluster.cli("image-upload", "dv", "cirros-up", "--size=1Gi",
                       f"--image-path={image}", timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert status_of(cluster.http, f"{DVS}/cirros-up")["phase"] == "Succeeded"
    vm = yaml.safe_load(CIRROS.read_text())
    spec = vm["spec"]["template"]["spec"]
    spec["volumes"][0] = {"name": "containerdisk", "dataVolume": {"name": "cirros-up"}}
    assert cluster.http.post(VMS, json=vm).is_success
    assert cluster.http.put(f"{SUB_VM}/vm-cirros/start", json={}).is_success
    cluster.phase("vm-cirros", "Running")
    cluster.console_shows("vm-cirros", r"^virtstream-guest: init", r"^vm-cirros:~# ")
    assert cluster.http.put(f"{SUB_VM}/vm-cirros/stop", json={}).is_success
    until(lambda: not cluster.qemus(), timeout=BOOT_TIMEOUT, what="QEMU gone")
