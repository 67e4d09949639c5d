"""The guest images of qemu mode, built from Debian packages into the image catalogue.

A small Linux guest: Debian's cloud kernel (`linux-image-cloud-amd64`) and an initramfs
holding busybox-static, the virtio/ISO 9660 modules the kernel has as modules, and the init
in `ops/guest/` (serial console on ttyS0 and tty1, NoCloud cloud-init from the `cidata`
disk, DHCP with udhcpc, the QEMU guest agent, dropbear's SSH server, Debian's python3 for
Ansible's modules). The packages are
fetched with `apt-get download` and unpacked with `dpkg-deb -x` into a scratch dir:
nothing is installed on the host. Two forms:

- `virtstream-linux.raw`: a bootable disk (a FAT file system holding kernel, initrd and
  SYSLINUX, whose boot sector SeaBIOS runs; syslinux's installer works on the image through
  mtools, so no loop mount). The names KubeVirt's examples pull are symlinks to it
  (`cirros-container-disk-demo`, `fedora-with-test-tooling-container-disk`, ...).
- `virtstream-linux-kernel/boot/{vmlinuz,initrd.img}`: a kernelBoot container's file
  system; `alpine-ext-kernel-boot-demo` (vmi-kernel-boot.yaml) links its
  `/boot/vmlinuz-virt` and `/boot/initramfs-virt` to them.

Built once: `<image dir>/.virtstream-linux.json` records the recipe; a matching one means
there is nothing to do (`ensure_images`). `python -m ops.guest_images [--force] [DIR]`.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

from services.launcher.images import default_image_dir

GUEST = "virtstream-linux"
KERNEL_DIR = f"{GUEST}-kernel"
STAMP = f".{GUEST}.json"
GUEST_FILES = Path(__file__).with_name("guest")
#: Disk images of KubeVirt's examples and docs, all served by the built guest.
DISK_ALIASES = (
    "cirros-container-disk-demo",
    "alpine-container-disk-demo",
    "fedora-cloud-container-disk-demo",
    "fedora-with-test-tooling-container-disk",
    "fedora-realtime-container-disk",
    "virtio-container-disk",
    "cirros",
    "alpine",
    "fedora",
    "ubuntu",
    "centos-stream",
    "debian",
)
#: kernelBoot containers: name → (kernelPath, initrdPath) inside it.
KERNEL_ALIASES = {"alpine-ext-kernel-boot-demo": ("boot/vmlinuz-virt", "boot/initramfs-virt")}
#: The kernel's modules the guest loads (their dependencies are added): virtio devices, ISO
#: 9660 (the cloud-init seed), the panic devices (a guest's panic reaches the host: ISA's
#: is an ACPI device, pvpanic-mmio's), the ACPI power button and the input events acpid
#: reads it from, SCSI disks on virtio-scsi (where hotplugged volumes go).
MODULES = (
    "virtio_pci",
    "virtio_blk",
    "virtio_net",
    "virtio_console",
    "virtio-rng",
    "isofs",
    "pvpanic_mmio",
    "pvpanic_pci",
    "button",
    "evdev",
    "virtio_scsi",
    "sd_mod",
)
#: What the boot loader passes: both consoles, the serial one last (it is /dev/console).
CMDLINE = "console=tty0 console=ttyS0 quiet panic=-1"
PACKAGES = ("busybox-static", "syslinux", "syslinux-common", "mtools")
#: The QEMU guest agent, dropbear's SSH server and the shared libraries they run with
#: (busybox is static; they are not): their NEEDED closure goes into the initramfs with the
#: dynamic loader.
AGENT_PACKAGES = (
    "qemu-guest-agent",
    "dropbear-bin",
    "libcrypt1",
    "libtomcrypt1",
    "libtommath1",
    "libgmp10",
    "libc6",
    "libglib2.0-0",
    "libffi8",
    "libmount1",
    "libblkid1",
    "libselinux1",
    "libpcre2-8-0",
    "zlib1g",
    "libnuma1",
    "libudev1",
    "liburing2",
)
PROGRAMS = ("usr/sbin/qemu-ga", "usr/sbin/dropbear")
#: Debian's Python (what Ansible runs its modules with): the interpreter, the standard
#: library and those of its extension modules whose libraries are among these packages.
PYTHON = "python3.11"
PYTHON_PACKAGES = (
    f"{PYTHON}-minimal",
    f"lib{PYTHON}-minimal",
    f"lib{PYTHON}-stdlib",
    "libexpat1",
    "libbz2-1.0",
    "liblzma5",
    "libuuid1",
)
#: What no automation of a guest imports, left out to keep the initramfs (and so the boot
#: under TCG, which decompresses it) small: tests, IDE, GUI, docs, installers, databases,
#: terminals, and the extension modules that need OpenSSL, SQLite, ncurses, readline or
#: Berkeley DB (hashlib falls back to its built-in hashes without OpenSSL).
PYTHON_LEFT_OUT = frozenset(
    {
        "test", "idlelib", "tkinter", "turtledemo", "turtle.py", "ensurepip", "lib2to3",
        "pydoc_data", "pydoc.py", "distutils", "sqlite3", "curses", "dbm", "venv",
        "doctest.py", "__phello__", "sitecustomize.py", "EXTERNALLY-MANAGED", "LICENSE.txt",
        "config-3.11-x86_64-linux-gnu",
    }
)  # fmt: skip
PYTHON_EXTENSIONS_LEFT_OUT = ("_test", "xx", "_ctypes_test", "_codecs_", "audioop", "ossaudiodev")
LIB_DIRS = ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu")
LOADER = "ld-linux-x86-64.so.2"
#: What the agent's guest-get-osinfo reads.
OS_RELEASE = (
    'NAME="virtstream guest"\nID=virtstream\nVERSION_ID="1"\nVERSION="1"\n'
    'PRETTY_NAME="virtstream guest 1 (busybox, Debian\'s cloud kernel)"\n'
)
KERNEL_META = "linux-image-cloud-amd64"
DISK_BYTES = 48 * 1024 * 1024

Log = Callable[[str], None]


class GuestBuildError(RuntimeError):
    pass


def recipe() -> str:
    """Changes whenever what the build produces would: the guest's files and this module."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for path in sorted(GUEST_FILES.iterdir()):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def is_current(image_dir: Path) -> bool:
    try:
        stamp = json.loads((image_dir / STAMP).read_text())
    except (OSError, ValueError):
        return False
    return bool(stamp.get("recipe") == recipe() and (image_dir / f"{GUEST}.raw").is_file())


def ensure_images(image_dir: Path | None = None, *, force: bool = False, log: Log = print) -> Path:
    """Build the guest into image_dir unless an up-to-date build is there; returns the dir."""
    image_dir = image_dir or default_image_dir()
    if force or not is_current(image_dir):
        build(image_dir, log)
    return image_dir


def build(image_dir: Path, log: Log = print) -> None:
    for tool in ("apt-get", "apt-cache", "dpkg-deb", "qemu-img", "gzip"):
        if shutil.which(tool) is None:
            raise GuestBuildError(f"building the guest image needs {tool}")
    image_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vs-guest-") as tmp:
        work = Path(tmp)
        kernel_pkg = _kernel_package()
        packages = (*PACKAGES, *AGENT_PACKAGES, *PYTHON_PACKAGES)
        log(f"guest image: fetching {kernel_pkg} {' '.join(packages)}")
        debs = _download((kernel_pkg, *packages), work / "debs")
        root = _unpack(debs, work / "root")
        kernel = next((root / "boot").glob("vmlinuz-*"))
        initrd = work / "initrd.img"
        _initramfs(root, kernel.name.removeprefix("vmlinuz-"), initrd)
        disk = work / f"{GUEST}.raw"
        _boot_disk(root, kernel, initrd, disk)
        _install(image_dir, kernel, initrd, disk)
        (image_dir / STAMP).write_text(
            json.dumps({"recipe": recipe(), "kernel": kernel_pkg, "packages": packages}) + "\n"
        )
    log(f"guest image: {image_dir / GUEST}.raw and {image_dir / KERNEL_DIR}/boot/")


def _run(*command: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise GuestBuildError(f"{' '.join(command)} failed: {done.stderr.strip()[-500:]}")
    return done.stdout


def _kernel_package() -> str:
    """The versioned kernel package the meta-package points at (apt-get download takes no
    meta-package's dependencies)."""
    try:
        out = _run("apt-cache", "depends", KERNEL_META)
    except GuestBuildError:
        out = ""
    found = re.search(r"Depends: (linux-image-\S+-cloud-amd64)\b", out)
    if found is None and os.geteuid() == 0:
        # a machine whose package lists were never fetched (or were cleaned): fetch once
        _run("apt-get", "update", "-qq")
        out = _run("apt-cache", "depends", KERNEL_META)
        found = re.search(r"Depends: (linux-image-\S+-cloud-amd64)\b", out)
    if found is None:
        raise GuestBuildError(f"no kernel package behind {KERNEL_META} (apt-get update?)")
    return found.group(1)


def _download(packages: Iterable[str], into: Path) -> list[Path]:
    into.mkdir(parents=True)
    # The scratch dir is root's: apt's sandbox user could not write to it.
    _run("apt-get", "download", "-q", "-o", "APT::Sandbox::User=root", *packages, cwd=into)
    return sorted(into.glob("*.deb"))


def _unpack(debs: list[Path], root: Path) -> Path:
    root.mkdir(parents=True)
    for deb in debs:
        _run("dpkg-deb", "-x", str(deb), str(root))
    return root


def _module_paths(modules_dir: Path) -> dict[str, Path]:
    return {p.name.removesuffix(".ko").replace("-", "_"): p for p in modules_dir.rglob("*.ko")}


def _depends(path: Path) -> list[str]:
    # The module's .modinfo section: NUL-separated key=value strings (no depmod run here).
    found = re.search(rb"\x00depends=([^\x00]*)\x00", path.read_bytes())
    return [d.replace("-", "_") for d in found.group(1).decode().split(",") if d] if found else []


def load_order(modules_dir: Path, wanted: Iterable[str]) -> list[Path]:
    """The modules and their dependencies, each after what it depends on."""
    paths = _module_paths(modules_dir)
    order: list[Path] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        if name not in paths:
            raise GuestBuildError(f"kernel module {name} not found in {modules_dir}")
        for dep in _depends(paths[name]):
            visit(dep)
        order.append(paths[name])

    for name in wanted:
        visit(name.replace("-", "_"))
    return order


def _initramfs(root: Path, kernel_release: str, out: Path) -> None:
    tree = out.parent / "initramfs"
    for d in ("bin", "dev", "etc", "lib/modules", "mnt", "proc", "root", "run", "sys", "tmp"):
        (tree / d).mkdir(parents=True, exist_ok=True)
    busybox = tree / "bin" / "busybox"
    shutil.copy2(root / "bin" / "busybox", busybox)
    modules = load_order(root / "lib" / "modules" / kernel_release, MODULES)
    for module in modules:
        shutil.copy2(module, tree / "lib" / "modules" / module.name)
    (tree / "lib" / "modules" / "load-order").write_text(
        "".join(f"{m.name.removesuffix('.ko')}\n" for m in modules)
    )
    files = {
        "init": "init.sh",
        "etc/cloud-init.sh": "cloud-init.sh",
        "etc/udhcpc.sh": "udhcpc.sh",
        "etc/inittab": "inittab",
        "etc/profile": "profile",
        # busybox acpid runs /etc/acpi/<action>/<event> for the power button's event
        "etc/acpi/PWRF/00000080": "power-button.sh",
    }
    for target, source in files.items():
        (tree / target).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(GUEST_FILES / source, tree / target)
        os.chmod(tree / target, 0o755)
    (tree / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (tree / "etc" / "group").write_text("root:x:0:\n")
    # root has no password (the consoles' shells need none); cloud-init may set one
    (tree / "etc" / "shadow").write_text("root:*:0:0:99999:7:::\n")
    os.chmod(tree / "etc" / "shadow", 0o600)
    (tree / "home").mkdir(exist_ok=True)
    (tree / "etc" / "os-release").write_text(OS_RELEASE)
    _programs(root, tree)
    # busybox's own cpio (the cpio command is not on these machines), newc as the kernel wants
    names = sorted(str(p.relative_to(tree)) for p in tree.rglob("*"))
    listing = ("\n".join([".", *names]) + "\n").encode()
    done = subprocess.run(
        [str(busybox), "cpio", "-o", "-H", "newc"], cwd=tree, input=listing, capture_output=True
    )
    if done.returncode != 0:
        raise GuestBuildError(f"cpio failed: {done.stderr.decode().strip()}")
    out.write_bytes(gzip.compress(done.stdout, compresslevel=6))


def needed(path: Path) -> list[str]:
    """The shared libraries an ELF file names (its DT_NEEDED entries)."""
    with path.open("rb") as f:
        dynamic = ELFFile(f).get_section_by_name(".dynamic")
        if not isinstance(dynamic, DynamicSection):
            return []
        # pyelftools sets a DT_NEEDED tag's `needed` attribute to the name it points to
        return [str(vars(tag)["needed"]) for tag in dynamic.iter_tags("DT_NEEDED")]


def _python(root: Path, tree: Path, libs: dict[str, Path]) -> list[Path]:
    """Debian's python3 into the tree (`/usr/bin/python3`, `/usr/lib/python3.11`), less
    what PYTHON_LEFT_OUT names; returns the ELF files it runs (their libraries go too)."""
    (tree / "usr" / "bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(root / "usr" / "bin" / PYTHON, tree / "usr" / "bin" / PYTHON)
    os.symlink(PYTHON, tree / "usr" / "bin" / "python3")
    stdlib = root / "usr" / "lib" / PYTHON
    target = tree / "usr" / "lib" / PYTHON
    for entry in stdlib.iterdir():
        if entry.name in PYTHON_LEFT_OUT or entry.name == "lib-dynload":
            continue
        if entry.is_dir():
            shutil.copytree(entry, target / entry.name, ignore=shutil.ignore_patterns("test*"))
        elif entry.exists():  # Debian's links into /etc are not followed
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(entry, target / entry.name)
    # Bytecode made now by the guest's own interpreter (run here on the host's C library):
    # compiling in the guest takes seconds per run under TCG. The library is kept as bytecode
    # only (`-b`: beside where the source was, which Python imports without the source), half
    # the initramfs that sources and bytecode would make.
    _run(
        str(root / "usr" / "bin" / PYTHON), "-I", "-m", "compileall", "-q", "-b", "-j", "2",
        "-d", f"/usr/lib/{PYTHON}", str(target),
        env={"PYTHONHOME": str(tree / "usr"), "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )  # fmt: skip
    for source in target.rglob("*.py"):
        if source.with_suffix(".pyc").exists():
            source.unlink()
    elfs = [tree / "usr" / "bin" / PYTHON]
    (target / "lib-dynload").mkdir(parents=True)
    for ext in sorted((stdlib / "lib-dynload").glob("*.so")):
        if ext.name.startswith(PYTHON_EXTENSIONS_LEFT_OUT):
            continue
        if all(n in libs for n in needed(ext)):  # those needing other libraries stay out
            elfs.append(target / "lib-dynload" / ext.name)
            shutil.copy2(ext, elfs[-1])
    return elfs


def _programs(root: Path, tree: Path) -> None:
    """qemu-ga, dropbear and python3, their libraries (their NEEDED closure, found in the
    unpacked packages) and the dynamic loader, where the loader looks (/lib64,
    /lib/x86_64-linux-gnu)."""
    libs = {p.name: p for d in LIB_DIRS for p in (root / d).glob("*.so*") if p.is_file()}
    elfs = [root / program for program in PROGRAMS] + _python(root, tree, libs)
    wanted: set[str] = set()
    todo = [name for elf in elfs for name in needed(elf)]
    while todo:
        name = todo.pop()
        if name in wanted:
            continue
        if name not in libs:
            raise GuestBuildError(f"the guest's programs need {name}, not in the packages")
        wanted.add(name)
        todo += needed(libs[name].resolve())
    target = tree / "lib" / "x86_64-linux-gnu"
    target.mkdir(parents=True, exist_ok=True)
    for name in sorted(wanted | {LOADER}):
        shutil.copyfile(libs[name].resolve(), target / name)
        os.chmod(target / name, 0o755)
    (tree / "lib64").mkdir(exist_ok=True)
    os.symlink(f"../lib/x86_64-linux-gnu/{LOADER}", tree / "lib64" / LOADER)
    (tree / "usr" / "sbin").mkdir(parents=True, exist_ok=True)
    for program in PROGRAMS:
        shutil.copy2(root / program, tree / program)


def _boot_disk(root: Path, kernel: Path, initrd: Path, out: Path) -> None:
    """A whole-disk FAT file system with SYSLINUX in its boot sector (no partition table:
    SeaBIOS boots the first sector, which is syslinux's)."""
    tools = root / "usr" / "bin"
    env = {**os.environ, "PATH": f"{tools}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    with out.open("wb") as f:
        f.truncate(DISK_BYTES)
    image = str(out)
    _run(str(tools / "mformat"), "-i", image, "-v", "VSGUEST", "::", env=env)
    config = out.parent / "syslinux.cfg"
    config.write_text(
        # SERIAL: the boot loader's banner shows on the serial console too
        "SERIAL 0 115200\nDEFAULT linux\nPROMPT 0\nTIMEOUT 0\nLABEL linux\n"
        f"  KERNEL vmlinuz\n  INITRD initrd.img\n  APPEND {CMDLINE}\n"
    )
    for source, name in ((kernel, "vmlinuz"), (initrd, "initrd.img"), (config, "syslinux.cfg")):
        _run(str(tools / "mcopy"), "-i", image, str(source), f"::{name}", env=env)
    _run(str(tools / "syslinux"), "--install", image, env=env)


def _install(image_dir: Path, kernel: Path, initrd: Path, disk: Path) -> None:
    """Into the catalogue, each file replaced atomically (a running guest keeps its inode)."""
    boot = image_dir / KERNEL_DIR / "boot"
    boot.mkdir(parents=True, exist_ok=True)
    _replace(kernel, boot / "vmlinuz")
    _replace(initrd, boot / "initrd.img")
    _replace(disk, image_dir / f"{GUEST}.raw")
    for alias in DISK_ALIASES:
        _link(image_dir / f"{alias}.raw", f"{GUEST}.raw")
    for alias, (kernel_path, initrd_path) in KERNEL_ALIASES.items():
        for path, target in ((kernel_path, "vmlinuz"), (initrd_path, "initrd.img")):
            link = image_dir / alias / path
            link.parent.mkdir(parents=True, exist_ok=True)
            depth = "../" * (len(Path(alias, path).parts) - 1)
            _link(link, f"{depth}{KERNEL_DIR}/boot/{target}")


def _replace(source: Path, target: Path) -> None:
    partial = target.with_name(f".{target.name}.partial")
    shutil.copyfile(source, partial)
    os.replace(partial, target)


def _link(link: Path, target: str) -> None:
    """An alias; a file the user put under that name is theirs and stays."""
    if link.is_symlink() and os.readlink(link) == target:
        return
    if link.exists() and not link.is_symlink():
        return
    partial = link.with_name(f".{link.name}.partial")
    partial.unlink(missing_ok=True)
    partial.symlink_to(target)
    os.replace(partial, link)


def main() -> None:
    parser = argparse.ArgumentParser(description="Build the qemu-mode guest images")
    parser.add_argument("image_dir", nargs="?", type=Path, default=None)
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    args = parser.parse_args()
    image_dir = args.image_dir or default_image_dir()
    if not args.force and is_current(image_dir):
        print(f"guest image: up to date in {image_dir}")
        return
    ensure_images(image_dir, force=True)


if __name__ == "__main__":
    main()
