"""The image catalogue: what a containerDisk or a kernelBoot container reference resolves to.

There is no registry to pull from. An image directory stands in for one:

- `<dir>/<name>.qcow2|.raw|.img|.iso` (or `<name>` alone) is a disk image: a containerDisk
  whose reference names `<name>` boots it (through a per-VMI overlay, see storage.py);
- `<dir>/<name>/` is a container's file system: a `firmware.kernelBoot.container` naming
  `<name>` takes its kernelPath and initrdPath inside it.

`<name>` is the reference's last path segment without tag or digest, so
`registry:5000/kubevirt/cirros-container-disk-demo:devel` and
`quay.io/kubevirt/cirros-container-disk-demo` are both `cirros-container-disk-demo`; the
whole reference with `/` as `_` is tried too. Entries may be symlinks: the built guest
(ops/guest_images.py) is linked under the names KubeVirt's examples use. A reference with
no entry is an image pull failure (ErrImagePull), never a blank disk.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DISK_SUFFIXES = (".qcow2", ".raw", ".img", ".iso")
#: Where images live unless a handler is given --image-dir.
DEFAULT_IMAGE_DIR = Path.home() / ".cache" / "virtstream" / "images"


class ErrImagePull(ValueError):  # named for the reason the VMI reports
    """No image in the catalogue for a reference.

    The launcher reports a setup error as `<exception name>: <message>`, so the VMI's
    failure reads `ErrImagePull: failed to pull image ...` (projections/evolve.py keys on it).
    """

    def __init__(self, reference: str, image_dir: Path, detail: str = "") -> None:
        self.reference = reference
        super().__init__(
            f'failed to pull image "{reference}": '
            + (detail or f"{image_name(reference)!r} is not in the image catalogue {image_dir}")
            + " (`virtstream images` lists the available images)"
        )


def default_image_dir() -> Path:
    env = os.environ.get("VIRTSTREAM_IMAGE_DIR")
    return Path(env) if env else DEFAULT_IMAGE_DIR


def image_name(reference: str) -> str:
    """registry:5000/kubevirt/cirros-container-disk-demo:devel → cirros-container-disk-demo"""
    last = reference.rsplit("/", 1)[-1]
    return last.split("@", 1)[0].split(":", 1)[0]


def _candidates(reference: str) -> tuple[str, ...]:
    return (image_name(reference), reference.replace("/", "_"))


@dataclass(frozen=True)
class DefaultUser:
    """A cloud image's default user, as its cloud-init config (`system_info.default_user`)
    names it: `users: [default]` (cloud-init's default) creates it, with passwordless sudo
    and a locked password, and top-level `ssh_authorized_keys` and `password` are its."""

    name: str
    gecos: str
    groups: tuple[str, ...]
    home: str = ""

    @property
    def homedir(self) -> str:
        return self.home or ("/root" if self.name == "root" else f"/home/{self.name}")


ROOT = DefaultUser("root", "root", ())
_FEDORA = DefaultUser("fedora", "fedora Cloud User", ("wheel", "adm", "systemd-journal"))
_ALPINE = DefaultUser("alpine", "Alpine", ("adm", "wheel"))
_CIRROS = DefaultUser("cirros", "cirros", ("adm", "wheel"))
#: The default user of each distribution the catalogue's guest stands in for, from the
#: distributions' cloud images (an image of another name: root, this guest's own).
DEFAULT_USERS = {
    "centos-stream": DefaultUser("cloud-user", "Cloud User", ("adm", "systemd-journal")),
    "centos": DefaultUser("cloud-user", "Cloud User", ("adm", "systemd-journal")),
    "fedora": _FEDORA,
    "fedora-cloud-container-disk-demo": _FEDORA,
    "fedora-with-test-tooling-container-disk": _FEDORA,
    "fedora-realtime-container-disk": _FEDORA,
    "ubuntu": DefaultUser("ubuntu", "Ubuntu", ("adm", "cdrom", "dip", "lxd", "sudo")),
    "debian": DefaultUser(
        "debian",
        "Debian",
        ("adm", "audio", "cdrom", "dialout", "dip", "floppy", "plugdev", "sudo", "video"),
    ),
    "alpine": _ALPINE,
    "alpine-container-disk-demo": _ALPINE,
    "cirros": _CIRROS,
    "cirros-container-disk-demo": _CIRROS,
}


def default_user(reference: str | None) -> DefaultUser:
    """The default cloud-init user of the image a containerDisk reference names."""
    return DEFAULT_USERS.get(image_name(reference), ROOT) if reference else ROOT


def find_disk_image(image_dir: Path, reference: str) -> Path:
    for candidate in _candidates(reference):
        for suffix in ("", *DISK_SUFFIXES):
            path = image_dir / f"{candidate}{suffix}"
            if path.is_file():
                return path
    raise ErrImagePull(reference, image_dir)


@dataclass(frozen=True)
class KernelBoot:
    kernel: Path
    initrd: Path | None
    cmdline: str


def find_kernel_boot(
    image_dir: Path, reference: str, kernel_path: str, initrd_path: str, cmdline: str
) -> KernelBoot:
    """The kernel and initrd a kernelBoot container holds at the given paths."""
    for candidate in _candidates(reference):
        root = image_dir / candidate
        if root.is_dir():
            break
    else:
        raise ErrImagePull(reference, image_dir)
    kernel = _inside(root, reference, kernel_path, image_dir)
    initrd = _inside(root, reference, initrd_path, image_dir) if initrd_path else None
    return KernelBoot(kernel=kernel, initrd=initrd, cmdline=cmdline)


def _inside(root: Path, reference: str, path: str, image_dir: Path) -> Path:
    found = root / path.lstrip("/")
    if not found.is_file():
        raise ErrImagePull(reference, image_dir, f"no file {path} in the image")
    return found.resolve()


@dataclass(frozen=True)
class CatalogueEntry:
    name: str
    #: "disk" (a containerDisk) or "kernel" (a kernelBoot container's file system)
    kind: str
    path: Path
    #: what a symlinked entry points at (an alias), else None
    alias_of: str | None
    size: int


def catalogue(image_dir: Path) -> list[CatalogueEntry]:
    """Every image a reference can resolve to, sorted by name."""
    if not image_dir.is_dir():
        return []
    entries = []
    for path in sorted(image_dir.iterdir()):
        if path.name.startswith("."):
            continue
        alias_of = os.readlink(path) if path.is_symlink() else None
        if path.is_dir():
            size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
            entries.append(CatalogueEntry(path.name, "kernel", path, alias_of, size))
        elif path.is_file():
            name = path.name
            for suffix in DISK_SUFFIXES:
                name = name.removesuffix(suffix)
            entries.append(CatalogueEntry(name, "disk", path, alias_of, path.stat().st_size))
    return entries
