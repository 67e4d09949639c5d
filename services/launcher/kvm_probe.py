"""Which libvirt domain type this host runs guests with: `kvm` when KVM really works, else
`qemu` (TCG, software emulation).

/dev/kvm existing is not enough: under some nested hypervisors (e.g. PVM) KVM guests stall
in the firmware for seconds or forever. So the probe boots a diskless guest with KVM and
watches SeaBIOS's debug port (0x402) for "Booting from", i.e. the firmware has finished
and is looking for a boot device. On this machine kind that takes ~0.1 s under TCG; KVM
that needs longer than `threshold_seconds` is not worth it. The verdict is cached per boot
and QEMU binary, so only the first start after a reboot pays for the probe.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import msgspec

from services.launcher.domain_xml import DomainType

DEFAULT_THRESHOLD_SECONDS = 2.0
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "virtstream"
QEMU = "qemu-system-x86_64"
_PAST_FIRMWARE = b"Booting from"


class ProbeResult(msgspec.Struct, kw_only=True):
    domain_type: DomainType
    #: Seconds until the KVM guest got past its firmware; None if it did not in time.
    kvm_firmware_seconds: float | None
    reason: str
    key: str = ""


def _cache_key(qemu: str) -> str:
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    stat = os.stat(qemu)
    return f"{boot_id}:{qemu}:{stat.st_mtime_ns}"


def time_to_leave_firmware(accel: str, timeout: float, qemu: str = QEMU) -> float | None:
    """Seconds a diskless guest takes to finish SeaBIOS with `accel`; None if not within
    timeout."""
    with tempfile.TemporaryDirectory(prefix="vs-kvm-probe-") as tmp:
        log = Path(tmp) / "debugcon.log"
        started = time.monotonic()
        proc = subprocess.Popen(
            [
                qemu, "-machine", f"q35,accel={accel}", "-m", "64", "-display", "none",
                "-nodefaults", "-no-user-config", "-debugcon", f"file:{log}",
                "-global", "isa-debugcon.iobase=0x402",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            while time.monotonic() - started < timeout:
                if proc.poll() is not None:
                    return None  # QEMU refused (no /dev/kvm access, ...)
                with contextlib.suppress(FileNotFoundError):
                    if _PAST_FIRMWARE in log.read_bytes():
                        return time.monotonic() - started
                time.sleep(0.02)
            return None
        finally:
            proc.kill()
            proc.wait()


def probe(threshold_seconds: float = DEFAULT_THRESHOLD_SECONDS) -> ProbeResult:
    qemu = shutil.which(QEMU)
    if qemu is None:
        raise FileNotFoundError(QEMU)
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return ProbeResult(domain_type=DomainType.QEMU, kvm_firmware_seconds=None,
                           reason="/dev/kvm is not usable")  # fmt: skip
    seconds = time_to_leave_firmware("kvm", threshold_seconds, qemu)
    if seconds is None:
        return ProbeResult(
            domain_type=DomainType.QEMU,
            kvm_firmware_seconds=None,
            reason=f"a KVM guest did not get past its firmware within {threshold_seconds}s",
        )
    return ProbeResult(domain_type=DomainType.KVM, kvm_firmware_seconds=seconds, reason="KVM works")


def domain_type(
    cache_dir: str | os.PathLike[str] = DEFAULT_CACHE,
    threshold_seconds: float = DEFAULT_THRESHOLD_SECONDS,
) -> ProbeResult:
    """The probe's verdict, from the cache when this boot and QEMU binary were probed."""
    override = os.environ.get("VIRTSTREAM_DOMAIN_TYPE")
    if override:
        return ProbeResult(domain_type=DomainType(override), kvm_firmware_seconds=None,
                           reason="VIRTSTREAM_DOMAIN_TYPE")  # fmt: skip
    qemu = shutil.which(QEMU)
    if qemu is None:
        raise FileNotFoundError(QEMU)
    key = _cache_key(qemu)
    cache = Path(cache_dir) / "kvm-probe.json"
    with contextlib.suppress(OSError, msgspec.DecodeError, msgspec.ValidationError):
        cached = msgspec.json.decode(cache.read_bytes(), type=ProbeResult)
        if cached.key == key:
            return cached
    result = probe(threshold_seconds)
    result.key = key
    with contextlib.suppress(OSError):
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(".tmp")
        tmp.write_bytes(msgspec.json.encode(result))
        tmp.replace(cache)
    return result
