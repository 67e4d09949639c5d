"""What QEMU wrote about a domain: libvirt's per-domain log (`/var/log/libvirt/qemu/<domain>.log`,
in qemu mode `<node dir>/log/qemu/<domain>.log`, the node's bind mount) and the one-line cause
of a guest that stopped for good, read from it.

QEMU prints a KVM internal error as `KVM internal error. Suberror: N`, the extra data, then a
line naming the cause (`emulation failure`) and the register dump; the guest is then paused in
a state only a reset leaves (`cont` answers "Resetting the Virtual Machine is required").
"""

from __future__ import annotations

import re
from pathlib import Path

_KVM_ERROR = re.compile(r"KVM internal error\. Suberror: (\d+)")
#: the lines QEMU prints after the extra data, before the registers, that say what failed
_CAUSES = ("emulation failure",)
#: QEMU's run states a guest leaves only by a reset (query-status)
NEEDS_RESET = frozenset({"internal-error", "guest-panicked", "shutdown"})
_TAIL_BYTES = 64 * 1024


def log_path(uri: str, domain: str) -> Path | None:
    """A node libvirtd's log of `domain`, from its URI (`...?socket=<node dir>/sock/
    libvirt-sock` → `<node dir>/log/qemu/<domain>.log`); None for other URIs."""
    _, _, sock = uri.partition("socket=")
    path = Path(sock.split("&", 1)[0]) if sock else None
    if path is None or path.parent.name != "sock":
        return None
    return path.parent.parent / "log" / "qemu" / f"{domain}.log"


def read_tail(path: Path | None) -> str:
    if path is None:
        return ""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - _TAIL_BYTES))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def kvm_error(text: str) -> str | None:
    """`KVM internal error. Suberror: 1 (emulation failure)` for the last such error in
    QEMU's log text; None when there is none."""
    matches = list(_KVM_ERROR.finditer(text))
    if not matches:
        return None
    found = matches[-1]
    after = text[found.end() :].splitlines()[:16]
    cause = next((c for c in _CAUSES for line in after if line.strip() == c), None)
    return found.group(0) + (f" ({cause})" if cause else "")
