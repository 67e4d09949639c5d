"""KubeVirt's common instance types and preferences from the first start of `virtstream
up`, as its operator deploys them: a VM naming `u1.small` and `centos.stream9` is accepted
with no install step; a restart on the same bundle appends nothing to them; and
`--no-common-instancetypes` (KubeVirt's `commonInstancetypesDeployment.enabled: false`)
leaves them out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.integration.up_process import running_up

VMCF = "/apis/instancetype.kubevirt.io/v1beta1/virtualmachineclusterinstancetypes"
VMCP = "/apis/instancetype.kubevirt.io/v1beta1/virtualmachineclusterpreferences"
VMS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"


def _vm() -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "sized"},
        "spec": {
            "runStrategy": "Halted",
            "instancetype": {"name": "u1.small"},
            "preference": {"name": "centos.stream9"},
            "template": {"spec": {"domain": {"devices": {}}}},
        },
    }


def test_present_from_the_first_start_and_not_appended_again(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with running_up("vs-it-", 1, data_dir=data) as up:
        small = up.http.get(f"{VMCF}/u1.small")
        assert small.status_code == 200, small.text
        labels = small.json()["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "virt-operator"
        assert up.http.get(f"{VMCP}/centos.stream9").status_code == 200
        created = up.http.post(VMS, json=_vm())
        assert created.status_code == 201, created.text
        versions = {
            o["metadata"]["name"]: o["metadata"]["resourceVersion"]
            for o in up.http.get(VMCF).json()["items"]
        }
    with running_up("vs-it-", 1, data_dir=data) as up:
        again = {
            o["metadata"]["name"]: o["metadata"]["resourceVersion"]
            for o in up.http.get(VMCF).json()["items"]
        }
        assert again == versions


def test_left_out_when_asked() -> None:
    with running_up("vs-noit-", 1, "--no-common-instancetypes") as up:
        assert up.http.get(VMCF).json()["items"] == []
        refused = up.http.post(VMS, json=_vm())
        assert refused.status_code == 422
        assert "Failure to find instancetype" in refused.json()["message"]
