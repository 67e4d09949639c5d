"""The hypervisor probe's verdict and the causes read from QEMU's log (pure parts)."""

from __future__ import annotations

from pathlib import Path

from services.launcher import qemu_log
from services.launcher.domain_xml import DomainType
from services.launcher.kvm_probe import Boot, cache_key, start_error, verdict

# what QEMU wrote on a nested host whose KVM cannot run the guest's boot loader
KVM_LOG = """\
2026-11-25 19:45:48.102+0000: starting up libvirt version: 9.0.0, qemu version: 7.2.22
KVM internal error. Suberror: 1
extra data[0]: 0x0000000000000001
extra data[1]: 0x9090909090c3cf04
emulation failure
EAX=001000cc EBX=3e896766 ECX=00000000 EDX=00100037
Code=eb de ff 0d a8 39 00 00 75 06 ff 15 b4 96 00 00 61 83 c4 04 <cf> c3 90 90 55 57
2026-11-25 19:45:57.241+0000: Domain id=1 is tainted: custom-monitor
"""


def test_a_kvm_internal_error_is_named_with_its_cause() -> None:
    assert qemu_log.kvm_error(KVM_LOG) == "KVM internal error. Suberror: 1 (emulation failure)"
    assert qemu_log.kvm_error("qemu started\n") is None


def test_the_log_of_a_node_libvirtds_domain() -> None:
    uri = "qemu+unix:///system?socket=/d/nodes/node-1/sock/libvirt-sock"
    assert qemu_log.log_path(uri, "default_vm") == Path("/d/nodes/node-1/log/qemu/default_vm.log")
    assert qemu_log.log_path("qemu:///system", "default_vm") is None


def test_qemus_start_failure_in_one_line() -> None:
    message = (
        "internal error: qemu unexpectedly closed the monitor: 2026-11-25T19:45:45.706591Z "
        "qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69\n"
        "qemu-system-x86_64: ../../target/i386/kvm/kvm.c:3183: kvm_buf_set_msrs: Assertion"
    )
    assert start_error(message) == "QEMU exited at start: failed to set MSR 0x10a to 0x69"
    other = (
        "internal error: process exited while connecting to monitor: qemu-system-x86_64: "
        "error: failed to set MSR 0x10a to 0x69"
    )
    assert start_error(other) == "QEMU exited at start: failed to set MSR 0x10a to 0x69"


def test_kvm_wins_when_the_guest_reaches_its_init_with_it() -> None:
    result = verdict(Boot(ok=True, seconds=1.23))
    assert result.domain_type is DomainType.KVM
    assert result.reason == "the guest image reached its init in 1.2s under KVM"


def test_tcg_when_kvm_cannot_boot_the_guest() -> None:
    kvm = Boot(ok=False, detail="KVM internal error. Suberror: 1 (emulation failure) after 0.4s")
    result = verdict(kvm)
    assert result.domain_type is DomainType.QEMU
    assert result.reason == (
        "KVM cannot run the guest image here "
        "(KVM internal error. Suberror: 1 (emulation failure) after 0.4s)"
    )
    unusable = verdict(None, kvm_unusable="/dev/kvm is not usable")
    assert unusable.domain_type is DomainType.QEMU
    assert unusable.reason == "KVM cannot run the guest image here (/dev/kvm is not usable)"


def test_a_kvm_slower_than_tcg_loses_and_a_slow_one_still_beats_a_slower_tcg() -> None:
    result = verdict(Boot(ok=True, seconds=12.0), Boot(ok=True, seconds=4.0))
    assert result.domain_type is DomainType.QEMU
    assert result.reason == (
        "the guest image reached its init in 4.0s under TCG, in 12.0s under KVM"
    )
    kept = verdict(Boot(ok=True, seconds=8.0), Boot(ok=True, seconds=20.0))
    assert kept.domain_type is DomainType.KVM
    assert kept.reason == (
        "the guest image reached its init in 8.0s under KVM (TCG: reached its init in 20.0s)"
    )


def test_the_cache_key_changes_with_the_image(tmp_path: Path) -> None:
    image = tmp_path / "virtstream-linux.raw"
    image.write_bytes(b"a")
    qemu = tmp_path / "qemu"
    qemu.write_bytes(b"q")
    before = cache_key(image, str(qemu))
    assert cache_key(image, str(qemu)) == before
    image.write_bytes(b"bb")
    assert cache_key(image, str(qemu)) != before
