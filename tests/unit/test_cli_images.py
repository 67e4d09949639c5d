"""`virtstream images`: add an image under a name, list the catalogue with aliases."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from services.launcher import images

pytestmark = pytest.mark.skipif(shutil.which("qemu-img") is None, reason="needs qemu-img")


def test_an_added_image_is_what_its_name_resolves_to(tmp_path: Path) -> None:
    catalogue = tmp_path / "images"
    disk = tmp_path / "disk.img"
    disk.write_bytes(b"\0" * 4096)  # qemu-img sees raw
    runner = CliRunner()
    added = runner.invoke(
        app, ["images", "add", "my-disk", str(disk), "--image-dir", str(catalogue)]
    )
    assert added.exit_code == 0, added.output
    found = images.find_disk_image(catalogue, "registry.example/team/my-disk:v2")
    assert found == catalogue / "my-disk.raw"
    (catalogue / "cirros.raw").symlink_to("my-disk.raw")
    listed = runner.invoke(app, ["images", "--image-dir", str(catalogue)], env={"COLUMNS": "200"})
    assert listed.exit_code == 0, listed.output
    assert "my-disk" in listed.output and "my-disk.raw" in listed.output  # the alias's target
    again = runner.invoke(
        app, ["images", "add", "my-disk", str(disk), "--image-dir", str(catalogue)]
    )
    assert again.exit_code == 1 and "exists" in again.output


def test_an_image_of_another_format_is_refused(tmp_path: Path) -> None:
    vmdk = tmp_path / "disk.vmdk"
    subprocess.run(["qemu-img", "create", "-q", "-f", "vmdk", str(vmdk), "1M"], check=True)
    result = CliRunner().invoke(
        app, ["images", "add", "x", str(vmdk), "--image-dir", str(tmp_path / "images")]
    )
    assert result.exit_code == 1 and "vmdk" in result.output
    assert not any((tmp_path / "images").glob("x*"))


def test_the_groups_image_dir_reaches_its_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`images --image-dir DIR add ...` writes into DIR, not the default image dir."""
    default, catalogue = tmp_path / "default", tmp_path / "images"
    monkeypatch.setenv("VIRTSTREAM_IMAGE_DIR", str(default))
    disk = tmp_path / "disk.img"
    disk.write_bytes(b"\0" * 4096)
    runner = CliRunner()
    added = runner.invoke(app, ["images", "--image-dir", str(catalogue), "add", "g", str(disk)])
    assert added.exit_code == 0, added.output
    assert (catalogue / "g.raw").exists() and not default.exists()
    listed = runner.invoke(
        app, ["images", "--image-dir", str(catalogue), "list"], env={"COLUMNS": "200"}
    )
    assert listed.exit_code == 0, listed.output
    assert re.search(r"^g\s+disk\s", listed.output, re.M), listed.output  # DIR's image


def test_the_readmes_images_lines_as_printed(tmp_path: Path) -> None:
    """The README's `images` lines in a shell with the CLI on PATH, beside a ./disk.qcow2,
    with an image dir of their own (`images build` downloads Debian packages: not here)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = readme[readme.index("```sh\nvirtstream images ") + 6 :]
    lines = [line.split("  #")[0].strip() for line in block[: block.index("```")].splitlines()]
    assert lines[:2] == ["virtstream images", "virtstream images add my-disk ./disk.qcow2"]
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "disk.qcow2", "1M"], cwd=tmp_path)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "VIRTSTREAM_IMAGE_DIR": str(tmp_path / "images"),
        "COLUMNS": "200",
    }
    for line in (lines[1], lines[0]):
        done = subprocess.run(
            ["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, (line, done.stderr)
    assert re.search(r"^my-disk\s+disk\s", done.stdout, re.M), done.stdout
    assert (tmp_path / "images" / "my-disk.qcow2").exists()
