"""The handler's volume copies, carried out: each persistent volume's qcow2 copied whole
with `qemu-img convert` (storage.copy_volume). A running domain is paused through the
node's libvirtd for the copy (QEMU flushes its disks when it stops) and resumed after, so
a copy taken online is crash-consistent; with a guest agent its file systems are frozen
first and thawed after (`virDomainFSFreeze`), as KubeVirt's online snapshots do."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import structlog

from services.handler.volumes import CopyVolumes
from services.launcher import storage

log = structlog.get_logger()


@contextlib.contextmanager
def _paused(uri: str, domain: str) -> Iterator[None]:
    if not domain:
        yield
        return
    import libvirt

    conn = libvirt.open(uri)
    try:
        dom = conn.lookupByName(domain)
        was_running = dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING
        frozen = was_running and _freeze(dom)
        if was_running:
            dom.suspend()
        try:
            yield
        finally:
            if was_running:
                dom.resume()
            if frozen:
                with contextlib.suppress(libvirt.libvirtError):
                    dom.fsThaw()
    finally:
        conn.close()


def _freeze(dom: Any) -> bool:
    """Freeze the guest's file systems through its agent (KubeVirt's online snapshot):
    the copy is then consistent for the guest's file systems, not only crash-consistent.
    A guest without an agent is copied paused only."""
    import libvirt

    try:
        count = dom.fsFreeze()
    except libvirt.libvirtError as e:
        log.info("no guest agent freeze", domain=dom.name(), reason=e.get_error_message())
        return False
    log.info("guest file systems frozen", domain=dom.name(), count=count)
    return True


def copy_volumes(action: CopyVolumes, disk_dir: str, uri: str) -> str:
    """Run one job; "" when every copy is done, else the failure in one line."""
    ns = action.namespace
    try:
        with _paused(uri, action.domain):
            for c in action.copies:
                claim = storage.claim_path(disk_dir, ns, c.claim)
                backup = storage.backup_path(disk_dir, ns, c.backup)
                source, target = (backup, claim) if action.restore else (claim, backup)
                storage.copy_volume(Path(source), Path(target))
    except Exception as e:  # a libvirt or qemu-img failure: reported, never raised
        log.warning("volume copy failed", job=action.key, error=str(e))
        return str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
    log.info("volumes copied", job=action.key, volumes=[c.volume for c in action.copies])
    return ""
