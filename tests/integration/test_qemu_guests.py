"""Real guests in qemu mode (TCG): the image catalogue's Linux guest boots from KubeVirt's
manifests through the whole control plane, one `virtstream up --hypervisor qemu` for the
module. vm-cirros.yaml unchanged reaches the guest's prompt on its serial console (and runs
its user-data script); NoCloud user-data sets the hostname; a kernelBoot VMI boots; an
image the catalogue lacks fails the VMI with ErrImagePull and starts no QEMU.

Each test stops its guest (two shared cores). Skipped without the qemu packages or root."""

from __future__ import annotations

import json
import random
import re
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from websockets.sync.client import ClientConnection

from services.handler.planner import MAX_ATTEMPTS
from tests.conftest import REPO
from tests.integration.polling import until
from tests.integration.qemu_support import CIRROS, qemu_marks
from tests.integration.qemu_up import (
    BOOT_TIMEOUT,
    SUB_VM,
    VMIS,
    VMS,
    Cluster,
    running_cluster,
)

pytestmark = qemu_marks

EXAMPLES = REPO / "examples" / "kubevirt"


def shell(ws: ClientConnection, command: str, seconds: float = 20.0) -> str:
    """Type a command on the guest's console; what came back until a marker the command
    echoes (so the echo of the typed line does not count) or `seconds`."""
    mark = f"{random.randrange(10**6):06d}"
    ws.send(f"\r{command}; echo done-$((1000000+{mark}))\r".encode())
    out, end = "", time.monotonic() + seconds
    while f"done-{1000000 + int(mark)}" not in out and time.monotonic() < end:
        try:
            data = ws.recv(timeout=max(0.1, end - time.monotonic()))
        except TimeoutError:
            break
        out += data.decode(errors="replace") if isinstance(data, bytes) else data
    return out


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_cluster("vs-qg-") as c:
        yield c


def example(name: str) -> dict[str, Any]:
    return dict(yaml.safe_load((EXAMPLES / name).read_text()))


def test_vm_cirros_boots_to_the_guests_prompt_on_its_serial_console(cluster: Cluster) -> None:
    # `up` booted the guest image under KVM (and TCG unless KVM was quick) and said which
    verdicts = [line for line in cluster.output if line.startswith("domain type ")]
    assert len(verdicts) == 1, cluster.output
    said = re.match(r"domain type (kvm|qemu)\b.*?: (.+)", verdicts[0])
    assert said is not None, verdicts[0]
    # KVM's boot decided: it reached the guest's init, or it could not
    assert re.search(r"reached its init|KVM cannot run the guest image here", said.group(2))
    assert cluster.http.post(VMS, json=yaml.safe_load(CIRROS.read_text())).is_success
    assert cluster.http.put(f"{SUB_VM}/vm-cirros/start", json={}).is_success
    status = cluster.phase("vm-cirros", "Running")["status"]
    assert status["virtstream.io/domain"]["type"] == said.group(1)
    text = cluster.console_shows(
        "vm-cirros",
        r"^virtstream-guest: init",  # the guest's userspace is up
        r"^printed from cloud-init userdata",  # the manifest's user-data script ran
        r"^vm-cirros:~# ",  # busybox's shell on ttyS0; the hostname from meta-data
    )
    assert "SYSLINUX" in text  # booted from the containerDisk through its boot loader
    # the guest agent: KubeVirt's AgentConnected condition, and what it says of the guest
    until(
        lambda: any(
            c["type"] == "AgentConnected" and c["status"] == "True"
            for c in cluster.vmi("vm-cirros")["status"]["conditions"]
        ),
        timeout=BOOT_TIMEOUT,
        what="AgentConnected",
    )
    out = cluster.cli("guestosinfo", "vm-cirros")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["hostname"] == "vm-cirros" and info["guestAgentVersion"]
    assert info["os"]["id"] == "virtstream" and info["os"]["kernelRelease"].endswith("cloud-amd64")
    assert json.loads(cluster.cli("userlist", "vm-cirros").stdout)["items"] == []  # no login
    # the guest's address, as its agent reports it: status.interfaces and the IP column
    (nic,) = until(
        lambda: [
            i
            for i in cluster.vmi("vm-cirros")["status"].get("interfaces", [])
            if ":" not in i.get("ipAddress", ":")  # the lease's, not the link-local first
        ],
        timeout=30,
        what="an IPv4 address in status.interfaces",
    )
    assert (nic["name"], nic["interfaceName"]) == ("default", "eth0")
    assert nic["ipAddress"].startswith("10.244.1.")  # node-1's subnet of the pod network
    assert nic["infoSource"] == "domain, guest-agent"
    table = cluster.cli("get", "vmi", "vm-cirros").stdout.splitlines()
    assert table[0].split()[3] == "IP" and table[1].split()[3] == nic["ipAddress"], table
    assert cluster.http.put(f"{SUB_VM}/vm-cirros/stop", json={}).is_success
    until(lambda: not cluster.qemus(), timeout=30, what="QEMU gone")


@pytest.fixture(scope="module")
def ssh_key() -> Iterator[Path]:
    """A key pair for the guests' users (`<dir>/id`, `<dir>/id.pub`)."""
    with tempfile.TemporaryDirectory(prefix="vs-key-") as d:
        key = Path(d) / "id"
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "t@x", "-f", str(key)],
            check=True,
        )
        yield key


def test_nocloud_cloud_config_sets_hostname_users_keys_files_and_commands(
    cluster: Cluster, ssh_key: Path
) -> None:
    key = ssh_key.with_suffix(".pub").read_text().strip()
    vmi = example("vmi-nocloud.yaml")
    for volume in vmi["spec"]["volumes"]:
        if "cloudInitNoCloud" in volume:
            volume["cloudInitNoCloud"]["userData"] = (
                "#cloud-config\nhostname: nocloud-guest\n"
                "users:\n  - default\n  - name: alice\n    ssh_authorized_keys:\n"
                f"      - {key}\n"
                f"ssh_authorized_keys:\n  - {key}\n"
                "write_files:\n  - path: /etc/greeting\n    content: hello from write_files\n"
                "bootcmd:\n  - echo bootcmd ran\n"
                'runcmd:\n  - echo "runcmd ran as $(id -un)"\n'
            )
    assert cluster.http.post(VMIS, json=vmi).is_success
    cluster.phase("vmi-nocloud", "Running")
    cluster.console_shows(
        "vmi-nocloud",
        r"^cloud-init: NoCloud seed on ",
        r"^bootcmd ran",
        r"^cloud-init: user alice",
        r"^cloud-init: hostname nocloud-guest",
        r"^runcmd ran as root",
        r"^virtstream-guest: eth0 10\.244\.1\.\d+/24",  # DHCP on the node's pod network
        r"^nocloud-guest:~# ",
    )
    with cluster.console_ws("vmi-nocloud") as ws:
        out = shell(
            ws,
            "cat /etc/greeting /root/.ssh/authorized_keys /home/alice/.ssh/authorized_keys; "
            "grep alice /etc/passwd",
        )
    assert "hello from write_files" in out
    assert out.count(key) == 2  # root's and alice's (the typed line does not hold it)
    assert "alice:x:" in out and "/home/alice" in out
    # in by SSH with the key cloud-init gave root and alice: `virtstream ssh` runs the local
    # ssh client through `virtstream port-forward --stdio` (the portforward subresource)
    for user in ("root", "alice"):
        done = cluster.cli(
            "ssh", f"{user}@vmi/vmi-nocloud", "-i", str(ssh_key),
            "--known-hosts", str(ssh_key.parent / "known_hosts"),
            "-t", "-o StrictHostKeyChecking=accept-new", "-t", "-o BatchMode=yes",
            "-c", "echo $(hostname) $(id -un) $(cat /etc/greeting)",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"nocloud-guest {user} hello from write_files"
    # port-forward: a local port whose connections reach the guest's SSH server
    forward = cluster.popen_cli("port-forward", "vmi/vmi-nocloud", "0:22")
    try:
        assert forward.stderr is not None
        line = forward.stderr.readline()
        m = re.match(r"Forwarding from 127\.0\.0\.1:(\d+) -> 22", line)
        assert m, line
        for _ in range(2):  # a connection each, one WebSocket each
            with socket.create_connection(("127.0.0.1", int(m[1])), timeout=30) as conn:
                assert conn.recv(64).startswith(b"SSH-2.0-dropbear")
    finally:
        forward.send_signal(signal.SIGINT)
        forward.wait(timeout=10)
    # a VMI that is not there: virt-api's answer, in one line
    missing = cluster.cli("port-forward", "vmi/nope", "22")
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        "error: Can't connect to websocket (404): "
        'virtualmachineinstances.kubevirt.io "nope" not found'
    )
    cluster.delete_vmi("vmi-nocloud")


def test_a_kernel_boot_vmi_boots_its_kernel_and_initrd(cluster: Cluster) -> None:
    assert cluster.http.post(VMIS, json=example("vmi-kernel-boot.yaml")).is_success
    cluster.phase("vmi-kernel-boot", "Running")
    text = cluster.console_shows(
        "vmi-kernel-boot", r"^virtstream-guest: virtstream ready", r"^virtstream:~# "
    )
    assert "SYSLINUX" not in text and "Command line: console=ttyS0" in text
    cluster.delete_vmi("vmi-kernel-boot")


def test_an_unknown_image_fails_the_vmi_with_err_image_pull_and_starts_no_qemu(
    cluster: Cluster,
) -> None:
    vmi = example("vmi-ephemeral.yaml")
    vmi["metadata"]["name"] = "no-image"
    reference = "quay.io/kubevirt/no-such-container-disk:v1"
    vmi["spec"]["volumes"][0]["containerDisk"]["image"] = reference
    assert cluster.http.post(VMIS, json=vmi).is_success
    status = cluster.phase("no-image", "Failed")["status"]
    assert status["reason"] == "ErrImagePull"
    synchronized = next(c for c in status["conditions"] if c["type"] == "Synchronized")
    assert synchronized["status"] == "False" and synchronized["reason"] == "ErrImagePull"
    assert f'failed to pull image "{reference}"' in synchronized["message"]
    assert "default_no-image" not in cluster.domains()
    assert cluster.qemus() == []
    assert not (cluster.data_dir / "disks" / "default_no-image").exists()


def test_a_guest_panic_fails_the_vmi_with_kubevirts_warning(cluster: Cluster) -> None:
    """A ConfigDrive seed names the guest and runs its runcmd, which panics the guest's
    kernel: its panic device tells QEMU, the VMI fails (Crashed) with the GuestPanicked
    warning, and `why` shows it."""
    vmi = example("vmi-nocloud.yaml")
    vmi["metadata"]["name"] = "panics"
    vmi["spec"]["hostname"] = "drive-host"
    vmi["spec"]["domain"]["devices"]["panicDevices"] = [{"model": "isa"}]
    for volume in vmi["spec"]["volumes"]:
        if "cloudInitNoCloud" in volume:
            volume["cloudInitConfigDrive"] = {
                "userData": "#cloud-config\nruncmd:\n  - echo config drive runcmd\n"
                "  - echo c > /proc/sysrq-trigger\n"
            }
            del volume["cloudInitNoCloud"]
    assert cluster.http.post(VMIS, json=vmi).is_success
    status = cluster.phase("panics", "Failed")["status"]
    assert status["reason"] == "Crashed"
    console = cluster.console_log("panics").read_text(errors="replace")
    for line in (
        "cloud-init: ConfigDrive seed on ",
        "cloud-init: hostname drive-host",
        "config drive runcmd",
        "Kernel panic",
    ):
        assert line in console, console[-2000:]
    events = cluster.events("panics")
    warnings = [e["data"] for e in events if e["type"] == "VMIWarning"]
    assert [(w["reason"], w["message"]) for w in warnings] == [
        ("GuestPanicked", "GuestPanicked (details unavailable)")
    ]
    stopped = next(e["data"] for e in events if e["type"] == "DomainStopped")
    assert stopped["reason"] == "Crashed"
    assert "Paused" not in {c["type"] for c in status["conditions"]}  # never PausedByUser
    why = cluster.why("panics")
    assert "DomainStopped" in why and "GuestPanicked" in why
    assert "default_panics" not in cluster.domains()
    cluster.delete_vmi("panics")


def test_a_domain_that_refuses_every_start_is_retried_with_backoff_then_given_up(
    cluster: Cluster,
) -> None:
    """libvirt refuses to start a domain whose host disk does not exist: the handler sends
    Start MAX_ATTEMPTS times with growing gaps, then records one SyncFailed warning and
    stops asking; its appends and log lines stay that few while the domain keeps refusing."""
    vmi = example("vmi-nocloud.yaml")
    vmi["metadata"]["name"] = "refuses"
    vmi["spec"]["domain"]["devices"]["disks"].append({"name": "gone", "disk": {"bus": "virtio"}})
    missing = "/nonexistent/virtstream/refuses.img"
    vmi["spec"]["volumes"].append({"name": "gone", "hostDisk": {"path": missing, "type": "Disk"}})
    assert cluster.http.post(VMIS, json=vmi).is_success

    def warnings() -> list[dict[str, Any]]:
        return [e["data"] for e in cluster.events("refuses") if e["type"] == "VMIWarning"]

    (warning,) = until(warnings, timeout=90, every=2.0, what="the SyncFailed warning")
    assert warning["reason"] == "SyncFailed"
    assert warning["message"].startswith(f"Start refused {MAX_ATTEMPTS} times, given up: ")
    assert missing in warning["message"]
    time.sleep(4)  # the domain still refuses; the handler asks no more (a loop: hundreds)
    events = cluster.events("refuses")
    assert [e["type"] for e in events] == [
        "VMICreated", "PodScheduled", "LauncherStarted", "VMIWarning"
    ]  # fmt: skip
    log = (cluster.data_dir / "logs" / "handler-node-1.log").read_text()
    rejected = [
        line
        for line in log.splitlines()
        if "command rejected" in line and "default/refuses" in line
    ]
    assert len(rejected) == MAX_ATTEMPTS, rejected
    status = cluster.vmi("refuses")["status"]
    synced = next(c for c in status["conditions"] if c["type"] == "Synchronized")
    assert synced["status"] == "False" and synced["message"] == warning["message"]
    cluster.delete_vmi("refuses")


def test_volumes_are_sized_as_written_and_hot_plugged_into_the_running_guest(
    cluster: Cluster,
) -> None:
    """A dataVolumeTemplate's size is its disk's; `virtstream addvolume` attaches a claim
    to the running guest (status.volumeStatus Ready, its disk seen by the guest's kernel)
    and `removevolume` takes it away again. Then `stop --grace-period 20`: the guest's
    acpid powers it off on the ACPI button, so the domain ends shut down, not destroyed at
    the grace period's end."""
    vm = yaml.safe_load(CIRROS.read_text())
    vm["metadata"]["name"] = "volumes"
    vm["spec"]["runStrategy"] = "Always"
    vm["spec"]["dataVolumeTemplates"] = [
        {"metadata": {"name": "volumes-data"},
         "spec": {"storage": {"resources": {"requests": {"storage": "2Gi"}}},
                  "source": {"blank": {}}}}
    ]  # fmt: skip
    template = vm["spec"]["template"]["spec"]
    template["domain"]["devices"]["disks"].append({"name": "data", "disk": {"bus": "virtio"}})
    template["volumes"].append({"name": "data", "dataVolume": {"name": "volumes-data"}})
    assert cluster.http.post(VMS, json=vm).is_success
    cluster.phase("volumes", "Running")
    cluster.console_shows("volumes", r"^volumes:~# ")
    claim = cluster.data_dir / "disks" / "volumes" / "default" / "volumes-data.qcow2"
    info = json.loads(
        subprocess.check_output(["qemu-img", "info", "-U", "--output=json", str(claim)])
    )
    assert info["virtual-size"] == 2 * 2**30
    with cluster.console_ws("volumes") as ws:
        # vda the image, vdb the cloud-init seed, vdc the claim: 2 GiB in 512-byte sectors
        assert "sectors=4194304" in shell(ws, "echo sectors=$(cat /sys/block/vdc/size)")
        # a file system on it, mounted: the guest agent lists it (KubeVirt's fslist)
        shell(ws, "mke2fs -q /dev/vdc && mkdir -p /data && mount /dev/vdc /data", seconds=60)
        fslist = until(
            lambda: [
                fs
                for fs in json.loads(cluster.cli("fslist", "volumes").stdout)["items"]
                if fs["mountPoint"] == "/data"
            ],
            timeout=30,
            what="/data in fslist",
        )
        assert fslist[0]["diskName"] == "vdc" and fslist[0]["totalBytes"] > 0
        hot = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "hot-data"},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}},
        }  # fmt: skip
        claims = "/api/v1/namespaces/default/persistentvolumeclaims"
        assert cluster.http.post(claims, json=hot).is_success
        out = cluster.cli("addvolume", "volumes", "--volume-name", "hot-data")
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == (
            "Successfully submitted add volume request to VM volumes for volume hot-data"
        )

        def ready() -> dict[str, Any] | None:
            entries = cluster.vmi("volumes")["status"].get("volumeStatus") or []
            found = [e for e in entries if e["name"] == "hot-data" and e.get("phase") == "Ready"]
            return found[0] if found else None

        entry = until(ready, timeout=60, what="the hotplugged volume Ready")
        assert entry["target"] == "sda"
        spec = cluster.vmi("volumes")["spec"]
        assert {"name": "hot-data", "persistentVolumeClaim": {
            "claimName": "hot-data", "hotpluggable": True}} in spec["volumes"]  # fmt: skip
        # the guest's kernel found the SCSI disk: 1 GiB (a claim no template sizes)
        seen = until(
            lambda: (
                "sectors=2097152" in (t := shell(ws, "echo sectors=$(cat /sys/block/sda/size)"))
                and t
            ),
            timeout=30,
            what="sda in the guest",
        )
        assert seen
        out = cluster.cli("removevolume", "volumes", "--volume-name", "hot-data")
        assert out.returncode == 0, out.stderr
        until(
            lambda: (
                "hot-data"
                not in [
                    e["name"] for e in cluster.vmi("volumes")["status"].get("volumeStatus") or []
                ]
            ),
            timeout=60,
            what="the volume detached",
        )
        until(
            lambda: "no-sda" in shell(ws, "[ -e /sys/block/sda ] && echo has-sda || echo no-sda"),
            timeout=30,
            what="sda gone from the guest",
        )
    console = cluster.console_log("volumes")
    uid = cluster.vmi("volumes")["metadata"]["uid"]
    assert cluster.http.put(f"{SUB_VM}/volumes/stop", json={"gracePeriod": 20}).is_success
    until(lambda: cluster.http.get(f"{VMIS}/volumes").status_code == 404, what="stopped")
    stopped = [
        e["data"]
        for e in cluster.events("volumes")
        if e["type"] == "DomainStopped" and e["aggregate"]["uid"] == uid
    ]
    assert [(s["reason"], s.get("gracePeriodExpired", False)) for s in stopped] == [
        ("Shutdown", False)
    ]
    log = console.read_text(errors="replace")
    assert "virtstream-guest: power button: powering off" in log
    assert "reboot: Power down" in log
