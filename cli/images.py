"""`virtstream images`: the image catalogue of qemu mode (services/launcher/images.py).

virtstream images                 what containerDisk / kernelBoot references resolve to
virtstream images build [--force] build the guest from Debian packages (ops/guest_images)
virtstream images add NAME FILE   add a qcow2/raw/iso disk image under NAME
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from ops import guest_images
from services.launcher import images

app = typer.Typer(help="The qemu-mode image catalogue: list, build, add", no_args_is_help=False)
console = Console()
err = Console(stderr=True)

IMAGE_DIR_HELP = "The image dir (default: $VIRTSTREAM_IMAGE_DIR, else ~/.cache/virtstream/images)"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_SUFFIX = {"qcow2": ".qcow2", "raw": ".raw", "iso": ".iso"}


def _dir(ctx: typer.Context, image_dir: Path | None) -> Path:
    """The command's own --image-dir, else the group's (`images --image-dir DIR add ...`)."""
    group = ctx.parent.params.get("image_dir") if ctx.parent is not None else None
    return image_dir or group or images.default_image_dir()


@app.callback(invoke_without_command=True)
def images_(
    ctx: typer.Context,
    image_dir: Path | None = typer.Option(None, help=IMAGE_DIR_HELP),
) -> None:
    """List the images a containerDisk or kernelBoot reference can resolve to."""
    if ctx.invoked_subcommand is not None:
        return
    list_(ctx, image_dir)


@app.command("list")
def list_(
    ctx: typer.Context, image_dir: Path | None = typer.Option(None, help=IMAGE_DIR_HELP)
) -> None:
    """List the images a containerDisk or kernelBoot reference can resolve to."""
    directory = _dir(ctx, image_dir)
    entries = images.catalogue(directory)
    if not entries:
        err.print(f"no images in {directory}: `virtstream images build` makes the guest")
        raise typer.Exit(1)
    table = Table(box=None, pad_edge=False, title=str(directory), title_justify="left")
    for column in ("NAME", "KIND", "SIZE", "ALIAS OF"):
        table.add_column(column)
    for e in entries:
        table.add_row(e.name, e.kind, f"{e.size / 2**20:.1f}Mi", e.alias_of or "")
    console.print(table)
    current = "up to date" if guest_images.is_current(directory) else "not built (or outdated)"
    console.print(f"built guest: {current}")


@app.command()
def build(
    ctx: typer.Context,
    image_dir: Path | None = typer.Option(None, help=IMAGE_DIR_HELP),
    force: bool = typer.Option(False, help="Rebuild even when the build is up to date"),
) -> None:
    """Build the guest (Debian's cloud kernel + busybox) into the image dir, once."""
    directory = _dir(ctx, image_dir)
    if not force and guest_images.is_current(directory):
        console.print(f"guest image up to date in {directory}")
        return
    try:
        guest_images.ensure_images(directory, force=True, log=console.print)
    except guest_images.GuestBuildError as exc:
        err.print(f"[red]error[/]: {exc}")
        raise typer.Exit(1) from None


@app.command()
def add(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The name references use (the last path segment)"),
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="A qcow2, raw or iso"),
    image_dir: Path | None = typer.Option(None, help=IMAGE_DIR_HELP),
    force: bool = typer.Option(False, help="Replace an image of that name"),
) -> None:
    """Add a disk image under NAME: `containerDisk: {image: any/registry/NAME:tag}` boots it."""
    if not _NAME.match(name):
        err.print(f"[red]error[/]: {name!r} is not an image name (letters, digits, . _ -)")
        raise typer.Exit(2)
    info = subprocess.run(
        ["qemu-img", "info", "--output=json", str(file)], capture_output=True, text=True
    )
    fmt = json.loads(info.stdout).get("format") if info.returncode == 0 else None
    if fmt not in _SUFFIX:
        err.print(f"[red]error[/]: {file} is not a qcow2, raw or iso image ({fmt or info.stderr})")
        raise typer.Exit(1)
    directory = _dir(ctx, image_dir)
    directory.mkdir(parents=True, exist_ok=True)
    existing = [
        p for p in (directory / f"{name}{s}" for s in ("", *images.DISK_SUFFIXES)) if p.exists()
    ]
    if existing and not force:
        err.print(f"[red]error[/]: {existing[0]} exists (--force replaces it)")
        raise typer.Exit(1)
    for path in existing:
        path.unlink()
    target = directory / f"{name}{_SUFFIX[fmt]}"
    shutil.copyfile(file, target)
    console.print(f"{name}: {target} ({fmt})")
