"""Which libvirt domain type this host runs guests with, decided by booting the real guest:
`kvm` when the guest image reaches its init under KVM, else `qemu` (TCG, software emulation).

/dev/kvm existing proves little: under nested hypervisors KVM may refuse the CPU model
(QEMU aborts at start), stall, or stop the guest with `KVM internal error ... emulation
failure` in the boot loader, after the firmware has run fine. So the probe boots the guest
image of the catalogue (`virtstream-linux.raw`) through the node's libvirtd with the domain
XML a VMI gets (`domain_xml.py`), read-only, and waits for the first line its init prints on
the serial console: KVM when that works (a KVM slower than `KVM_FAST_SECONDS` is compared
with a TCG boot and loses if TCG is faster), else TCG. The verdict says what KVM did (`up`
prints it).

The verdict is cached per host (boot id, QEMU and libvirtd binaries, /dev/kvm) and image
(path, size, mtime): a reboot, an upgrade or a rebuilt image probes again.
`VIRTSTREAM_DOMAIN_TYPE=qemu|kvm` overrides it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from services.launcher import qemu_log
from services.launcher.domain_xml import DomainType, build_domain_xml

DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "virtstream"
CACHE_FILE = "hypervisor-probe.json"
QEMU = "qemu-system-x86_64"
LIBVIRTD = "/usr/sbin/libvirtd"
GUEST_IMAGE = "virtstream-linux.raw"
#: The first line the guest's userspace prints (ops/guest/init.sh).
GUEST_UP = b"virtstream-guest: init at"
KVM_TIMEOUT_SECONDS = 30.0
TCG_TIMEOUT_SECONDS = 240.0
#: KVM reaching the init within this needs no comparison with TCG.
KVM_FAST_SECONDS = 5.0
_CACHE_ENTRIES = 16
#: Part of the cache key: a change to how the probe decides probes again.
PROBE_VERSION = "2"


class Boot(msgspec.Struct, frozen=True, kw_only=True):
    """One boot of the guest image: reached its init after `seconds`, or why not."""

    ok: bool
    seconds: float | None = None
    detail: str = ""


class ProbeResult(msgspec.Struct, kw_only=True):
    domain_type: DomainType
    #: One line: what each accelerator did, and so why this one.
    reason: str
    kvm: Boot | None = None
    tcg: Boot | None = None
    key: str = ""


# ------------------------------------------------------------------ the verdict (pure)
def _did(boot: Boot) -> str:
    return f"reached its init in {boot.seconds:.1f}s" if boot.ok else str(boot.detail)


def verdict(kvm: Boot | None, tcg: Boot | None = None, kvm_unusable: str = "") -> ProbeResult:
    """KVM when the guest reached its init with it (and no slower than TCG, when TCG was
    tried too), else TCG."""
    if kvm is None or not kvm.ok:
        why = kvm.detail if kvm is not None else kvm_unusable
        reason = f"KVM cannot run the guest image here ({why})"
        return ProbeResult(domain_type=DomainType.QEMU, reason=reason, kvm=kvm, tcg=tcg)
    assert kvm.seconds is not None
    if tcg is not None and tcg.ok and tcg.seconds is not None and tcg.seconds < kvm.seconds:
        reason = f"the guest image reached its init in {tcg.seconds:.1f}s under TCG, in " \
            f"{kvm.seconds:.1f}s under KVM"  # fmt: skip
        return ProbeResult(domain_type=DomainType.QEMU, reason=reason, kvm=kvm, tcg=tcg)
    reason = f"the guest image {_did(kvm)} under KVM"
    if tcg is not None:
        reason += f" (TCG: {_did(tcg)})"
    return ProbeResult(domain_type=DomainType.KVM, reason=reason, kvm=kvm, tcg=tcg)


def start_error(message: str) -> str:
    """libvirt's "internal error: qemu unexpectedly closed the monitor: <time> qemu-system-
    x86_64: error: failed to set MSR ..." → "QEMU exited at start: failed to set MSR ..."."""
    found = re.search(r"qemu-system-[\w-]+:\s*(?:error:\s*)?([^\n]+)", message)
    first = found.group(1).strip() if found else message.strip().splitlines()[0]
    return f"QEMU exited at start: {first}"


# ------------------------------------------------------------------ booting
def _probe_vmi(name: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "virtstream", "name": name, "uid": name},
        "spec": {
            "domain": {
                "resources": {"requests": {"memory": "128Mi"}},
                "devices": {
                    "disks": [
                        {"name": "containerdisk", "disk": {"bus": "virtio", "readonly": True}}
                    ]
                },
            }
        },
    }


def boot(uri: str, image: Path, dtype: DomainType, timeout: float) -> Boot:
    """Boot `image` read-only on the libvirtd at `uri` as a guest of type `dtype` until its
    init speaks on the serial console, the guest stops, or `timeout` passes."""
    import libvirt

    name = f"hypervisor-probe-{dtype}-{os.getpid()}"
    with tempfile.TemporaryDirectory(prefix="vs-probe-") as tmp:
        console = Path(tmp) / "console.log"
        xml = build_domain_xml(
            _probe_vmi(name),
            domain_type=dtype,
            disk_paths={"containerdisk": str(image)},
            console_log=str(console),
        )
        conn = libvirt.open(uri)
        started = time.monotonic()
        try:
            try:
                dom = conn.createXML(xml, 0)
            except libvirt.libvirtError as e:
                return Boot(ok=False, detail=start_error(e.get_error_message() or str(e)))
            try:
                return _watch(dom, console, qemu_log.log_path(uri, f"virtstream_{name}"),
                              started, timeout)  # fmt: skip
            finally:
                with contextlib.suppress(libvirt.libvirtError):
                    dom.destroy()
        finally:
            conn.close()


def _watch(dom: Any, console: Path, log: Path | None, started: float, timeout: float) -> Boot:
    import libvirt

    while (elapsed := time.monotonic() - started) < timeout:
        with contextlib.suppress(FileNotFoundError):
            if GUEST_UP in console.read_bytes():
                return Boot(ok=True, seconds=round(elapsed, 2))
        state, _reason = dom.state()
        if state == libvirt.VIR_DOMAIN_PAUSED or state == libvirt.VIR_DOMAIN_CRASHED:
            why = qemu_log.kvm_error(qemu_log.read_tail(log)) or "the guest stopped"
            return Boot(ok=False, detail=f"{why} after {elapsed:.1f}s")
        if state not in (libvirt.VIR_DOMAIN_RUNNING, libvirt.VIR_DOMAIN_BLOCKED):
            return Boot(ok=False, detail=f"the guest ended after {elapsed:.1f}s")
        time.sleep(0.05)
    return Boot(ok=False, detail=f"no sign of the guest's init within {timeout:.0f}s")


def probe(uri: str, image: Path) -> ProbeResult:
    """KVM's boot decides; TCG is booted too only to compare with a KVM that was slow (a
    KVM that fails leaves TCG the only choice, and its boot would only cost time)."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return verdict(None, kvm_unusable="/dev/kvm is not usable")
    kvm = boot(uri, image, DomainType.KVM, KVM_TIMEOUT_SECONDS)
    if not kvm.ok or (kvm.seconds is not None and kvm.seconds <= KVM_FAST_SECONDS):
        return verdict(kvm)
    return verdict(kvm, boot(uri, image, DomainType.QEMU, TCG_TIMEOUT_SECONDS))


# ------------------------------------------------------------------ the cache
def _stamp(path: str | os.PathLike[str]) -> str:
    try:
        st = os.stat(path)
    except OSError:
        return f"{path}:-"
    return f"{os.path.realpath(path)}:{st.st_size}:{st.st_mtime_ns}"


def cache_key(image: Path, qemu: str) -> str:
    """Changes when the host does (reboot, QEMU or libvirtd upgrade, /dev/kvm) or the image."""
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    kvm = "kvm" if os.path.exists("/dev/kvm") else "nokvm"
    return "|".join((PROBE_VERSION, boot_id, _stamp(qemu), _stamp(LIBVIRTD), kvm, _stamp(image)))


class _Cache(msgspec.Struct):
    results: dict[str, ProbeResult] = msgspec.field(default_factory=dict)


def _load(path: Path) -> _Cache:
    with contextlib.suppress(OSError, msgspec.DecodeError, msgspec.ValidationError):
        return msgspec.json.decode(path.read_bytes(), type=_Cache)
    return _Cache()


def _save(path: Path, key: str, result: ProbeResult) -> None:
    cache = _load(path)
    cache.results.pop(key, None)
    cache.results[key] = result
    while len(cache.results) > _CACHE_ENTRIES:
        cache.results.pop(next(iter(cache.results)))
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_bytes(msgspec.json.encode(cache))
        tmp.replace(path)


def domain_type(
    uri: str,
    image_dir: Path | None = None,
    cache_dir: str | os.PathLike[str] = DEFAULT_CACHE,
) -> ProbeResult:
    """The verdict for this host and the catalogue's guest image, from the cache when they
    were probed before; `uri` is a node's libvirtd, where the probe boots."""
    override = os.environ.get("VIRTSTREAM_DOMAIN_TYPE")
    if override:
        return ProbeResult(domain_type=DomainType(override), reason="VIRTSTREAM_DOMAIN_TYPE")
    qemu = shutil.which(QEMU)
    if qemu is None:
        raise FileNotFoundError(QEMU)
    from services.launcher.images import default_image_dir

    image = (image_dir or default_image_dir()) / GUEST_IMAGE
    if not image.exists():
        return ProbeResult(
            domain_type=DomainType.QEMU,
            reason=f"no guest image to probe with ({image}): TCG, which boots anything",
        )
    key = cache_key(image, qemu)
    path = Path(cache_dir) / CACHE_FILE
    cached = _load(path).results.get(key)
    if cached is not None:
        return cached
    result = probe(uri, image)
    result.key = key
    _save(path, key, result)
    return result
