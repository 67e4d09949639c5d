"""Ansible's kubevirt.core collection (the PyPI `ansible` package ships it, over
kubernetes.core and the official Python client) against `virtstream up --hypervisor qemu`,
with the kubeconfig `up` writes: playbooks of tests/ansible/ create a VM from an instance
type and a preference and wait for it, describe it and its VMI, stop, start and restart it
(each repeat unchanged) and delete it; `ansible -m setup` gathers a guest's facts over SSH
as the image's default user (cloud-user for CentOS Stream) with the guest's python3. The
inventory plugin reads core v1 Services too; its hosts are the guests' addresses on a
secondary network (a bridge NetworkAttachmentDefinition), which ssh reaches from the
cluster's network namespace.

One cluster and one VM for the module (two shared cores, TCG)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from host import pod_network
from tests.conftest import REPO
from tests.integration.polling import until
from tests.integration.qemu_support import qemu_marks
from tests.integration.qemu_up import Cluster, running_cluster

BIN = Path(sys.executable).parent
PLAYBOOKS = REPO / "tests" / "ansible"
VM = "ansible-vm"

pytestmark = [
    *qemu_marks,
    pytest.mark.skipif(not (BIN / "ansible-playbook").exists(), reason="ansible not installed"),
    pytest.mark.timeout(900),
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_cluster("vs-ans-") as c:
        if not c.http.get(
            "/apis/instancetype.kubevirt.io/v1beta1/virtualmachineclusterinstancetypes/u1.small"
        ).is_success:
            done = c.cli("instancetypes", "install")
            assert done.returncode == 0, done.stderr
        yield c


@pytest.fixture(scope="module")
def key() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="vs-ans-key-") as d:
        path = Path(d) / "id"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
        yield path


def ansible(
    cluster: Cluster, tool: str, *args: str, timeout: float = 600, netns: str = ""
) -> subprocess.CompletedProcess[str]:
    """An Ansible tool with the kubeconfig `up` wrote; `netns`: run in that namespace."""
    kubeconfig = str(cluster.data_dir / "kubeconfig")  # written by `virtstream up`
    env = {
        **os.environ,
        "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "KUBECONFIG": kubeconfig,
        "K8S_AUTH_KUBECONFIG": kubeconfig,
        "ANSIBLE_HOME": str(cluster.data_dir / "ansible"),
        "ANSIBLE_LOCALHOST_WARNING": "False",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
        "ANSIBLE_PIPELINING": "True",  # modules on the guest's python3's stdin: no sftp there
        "ANSIBLE_HOST_KEY_CHECKING": "False",
        "ANSIBLE_NOCOLOR": "True",
    }
    inside = ["ip", "netns", "exec", netns] if netns else []
    return subprocess.run(
        [*inside, str(BIN / tool), *args], env=env, cwd=REPO, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


def playbook(cluster: Cluster, name: str, *args: str) -> str:
    done = ansible(cluster, "ansible-playbook", str(PLAYBOOKS / name), *args)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    return done.stdout


def test_create_wait_and_describe_a_vm_from_an_instance_type(cluster: Cluster, key: Path) -> None:
    out = playbook(
        cluster, "vm_create.yml", "-e", json.dumps({
            "vm_name": VM, "ssh_public_key": key.with_suffix(".pub").read_text().strip(),
        }),
    )  # fmt: skip
    assert "failed=0" in out
    assert cluster.vmi(VM)["spec"]["domain"]["memory"]["guest"] == "2Gi"  # u1.small's


def test_ssh_into_the_guest_as_its_default_user_and_gather_facts(
    cluster: Cluster, key: Path
) -> None:
    # through the VMI's portforward subresource, as `virtctl ssh --local-ssh` does
    proxy = f"{BIN / 'virtstream'} -s {cluster.server} port-forward --stdio vmi/{VM} 22"
    inventory = cluster.data_dir / "guests.ini"
    inventory.write_text(
        f"[guests]\n{VM} ansible_user=cloud-user ansible_ssh_private_key_file={key} "
        "ansible_python_interpreter=/usr/bin/python3 "
        f'ansible_ssh_common_args=\'-o ProxyCommand="{proxy}" '
        "-o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no'\n"
    )
    playbook(cluster, "guest_facts.yml", "-i", str(inventory))
    done = ansible(cluster, "ansible", "-i", str(inventory), VM, "-m", "setup", "-a",
                   "filter=ansible_python*")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "/usr/bin/python3" in done.stdout and '"major": 3' in done.stdout


def test_stop_start_restart_and_delete_each_once(cluster: Cluster) -> None:
    out = playbook(cluster, "vm_lifecycle.yml", "-e", json.dumps({"vm_name": VM}))
    assert "failed=0" in out
    assert cluster.http.get(f"/apis/kubevirt.io/v1/namespaces/default/virtualmachines/{VM}") \
        .status_code == 404  # fmt: skip


def plain(value: object) -> str:
    """A variable as `ansible-inventory --list` prints it: ansible-core 2.19 prints a value
    from an untrusted source wrapped (`{"__ansible_unsafe": "..."}`)."""
    if isinstance(value, dict) and len(value) == 1:
        (value,) = value.values()
    return str(value)


def test_the_inventory_plugin_groups_the_vms(cluster: Cluster, key: Path) -> None:
    resources = cluster.http.get("/api/v1").json().get("resources", [])
    if not any(r.get("kind") == "Service" for r in resources):
        pytest.skip("the server does not serve core v1 Services, which the plugin reads")
    playbook(
        cluster, "vm_create.yml", "-e", json.dumps({
            "vm_name": VM, "ssh_public_key": key.with_suffix(".pub").read_text().strip(),
        }),
    )  # fmt: skip
    # the plugin skips a VMI whose interface reports no address yet (its guest's lease
    # comes after Ready): wait for the one it will read
    vmi = f"/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances/{VM}"
    until(
        lambda: any(
            i.get("name") == "bridge-network" and "." in str(i.get("ipAddress"))
            for i in (cluster.http.get(vmi).json().get("status") or {}).get("interfaces") or []
        ),
        timeout=120,
        what="the guest's address on the secondary network",
    )
    source = cluster.data_dir / "inventory.kubevirt.yml"
    source.write_text(
        "plugin: kubevirt.core.kubevirt\nnamespaces: [default]\nlabel_selector: "
        "app=ansible-test\ncreate_groups: true\nnetwork_name: bridge-network\n"
        f"cache: true\ncache_plugin: ansible.builtin.jsonfile\n"
        f"cache_connection: {cluster.data_dir / 'inventory-cache'}\n"
    )
    done = ansible(cluster, "ansible-inventory", "-i", str(source), "--list")
    assert done.returncode == 0, done.stdout + done.stderr
    listed = json.loads(done.stdout)
    host = f"default-{VM}"
    assert host in listed["namespace_default"]["hosts"]
    assert host in listed["label_app_ansible_test"]["hosts"]
    hostvars = listed["_meta"]["hostvars"][host]
    address = plain(hostvars["ansible_host"])
    assert address.startswith("10.201."), address  # the secondary network's
    assert plain(hostvars["vmi_node_name"]) == "node-1"
    assert (cluster.data_dir / "inventory-cache").is_dir()

    # ssh to that address, as kubevirt.core's tests do, from where the bridge is: the
    # cluster's network namespace (the host's own network is never touched)
    inventory = cluster.data_dir / "bridged.ini"
    inventory.write_text(
        f"[guests]\n{host} ansible_host={address} ansible_user=cloud-user "
        f"ansible_ssh_private_key_file={key} ansible_python_interpreter=/usr/bin/python3 "
        "ansible_ssh_common_args='-o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no'\n"
    )
    netns = pod_network.netns_name(cluster.data_dir)
    done = ansible(cluster, "ansible", "-i", str(inventory), host, "-m", "setup", "-a",
                   "filter=ansible_all_ipv4_addresses", netns=netns)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert address in done.stdout, done.stdout
