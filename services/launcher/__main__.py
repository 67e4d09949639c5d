"""`python -m services.launcher`: run one launcher directly, without the zygote.

A fallback and a diagnostic tool: a fresh interpreter costs ~100 ms and ~45 MB, so the
handler normally spawns launchers through services.launcher.zygote instead.
"""

from __future__ import annotations

import argparse
import sys

import msgspec

from services.launcher.domain_xml import DEFAULT_DISK_DIR, DomainType
from services.launcher.hypervisor import TEST_URI
from services.launcher.process import LauncherConfig, configure_logging, run_launcher
from services.launcher.storage import DEFAULT_DISK_SIZE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.launcher")
    parser.add_argument("--vmi", required=True, help="VMI JSON file, or - for stdin")
    parser.add_argument("--socket", required=True, help="unix socket to serve the handler on")
    parser.add_argument("--uri", default=TEST_URI, help="libvirt connect URI")
    parser.add_argument(
        "--domain-type", default=DomainType.TEST.value, choices=[t.value for t in DomainType]
    )
    parser.add_argument("--emulator", default=None, help="emulator binary (qemu mode)")
    parser.add_argument("--disk-dir", default=DEFAULT_DISK_DIR)
    parser.add_argument("--image-dir", default=None, help="containerDisk images by name")
    parser.add_argument("--default-disk-size", default=DEFAULT_DISK_SIZE)
    parser.add_argument("--qemu-pid-dir", default=None, help="the node's QEMU pidfile dir")
    parser.add_argument(
        "--migration-target", action="store_true", help="attach to a domain arriving by migration"
    )
    args = parser.parse_args(argv)

    if args.vmi == "-":
        raw = sys.stdin.buffer.read()
    else:
        with open(args.vmi, "rb") as f:
            raw = f.read()
    configure_logging()
    return run_launcher(
        LauncherConfig(
            vmi=msgspec.json.decode(raw, type=dict),
            socket_path=args.socket,
            hypervisor_uri=args.uri,
            domain_type=DomainType(args.domain_type),
            emulator=args.emulator,
            disk_dir=args.disk_dir,
            image_dir=args.image_dir,
            default_disk_size=args.default_disk_size,
            qemu_pid_dir=args.qemu_pid_dir,
            migration_target=args.migration_target,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
