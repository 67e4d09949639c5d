"""Disk preparation for qemu mode: image lookup by name, overlays, blank disks, NoCloud ISO."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from services.launcher import storage
from services.launcher.domain_xml import DomainType, build_domain_xml

needs_qemu_img = pytest.mark.skipif(shutil.which("qemu-img") is None, reason="needs qemu-img")


def test_image_name_is_the_references_last_segment_without_tag_or_digest() -> None:
    assert storage.image_name("registry:5000/kubevirt/cirros-container-disk-demo:devel") == (
        "cirros-container-disk-demo"
    )
    assert storage.image_name("quay.io/containerdisks/fedora@sha256:abc") == "fedora"
    assert storage.image_name("cirros") == "cirros"


def test_find_image_tries_the_name_with_common_suffixes(tmp_path: Path) -> None:
    (tmp_path / "fedora.qcow2").write_bytes(b"")
    assert storage.find_image(str(tmp_path), "quay.io/containerdisks/fedora:39") == (
        tmp_path / "fedora.qcow2"
    )
    assert storage.find_image(str(tmp_path), "cirros") is None
    assert storage.find_image(None, "fedora") is None


def _vmi() -> dict[str, object]:
    return {
        "metadata": {"name": "s", "namespace": "ns", "uid": "u"},
        "spec": {
            "domain": {
                "memory": {"guest": "64Mi"},
                "devices": {
                    "disks": [
                        {"name": "root", "disk": {"bus": "virtio"}},
                        {"name": "scratch", "disk": {"bus": "virtio"}},
                        {"name": "seed", "disk": {"bus": "virtio"}},
                    ]
                },
            },
            "volumes": [
                {"name": "root", "containerDisk": {"image": "registry/x/base:1"}},
                {"name": "scratch", "emptyDisk": {"capacity": "2Mi"}},
                {"name": "seed", "cloudInitNoCloud": {"userData": "#cloud-config\n"}},
            ],
        },
    }


def _info(path: str) -> dict[str, object]:
    out = subprocess.run(["qemu-img", "info", "--output=json", path], capture_output=True)
    return dict(json.loads(out.stdout))


@needs_qemu_img
def test_prepare_disks_overlays_images_and_renders_the_seed(tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    subprocess.run(["qemu-img", "create", "-q", "-f", "raw", str(images / "base.img"), "1M"])
    paths = storage.prepare_disks(_vmi(), "ns_s", str(tmp_path / "disks"), image_dir=str(images))

    root = _info(paths["root"])
    assert root["format"] == "qcow2" and root["backing-filename"] == str(images / "base.img")
    scratch = _info(paths["scratch"])
    assert scratch["virtual-size"] == 2 * 1024 * 1024
    if storage.iso_tool() is None:
        assert "seed" not in paths and storage.skipped_disks(_vmi(), paths) == ["seed"]
    else:
        assert Path(paths["seed"]).read_bytes()[0x8001:0x8006] == b"CD001"  # ISO 9660
    xml = build_domain_xml(
        _vmi(),
        domain_type=DomainType.QEMU,
        disk_paths=paths,
        omit_disks=storage.skipped_disks(_vmi(), paths),
    )
    assert 'type="qcow2"' in xml and paths["root"] in xml

    storage.remove_disks("ns_s", str(tmp_path / "disks"))
    assert not (tmp_path / "disks" / "ns_s").exists()


@needs_qemu_img
def test_without_an_image_a_blank_disk_of_the_default_size(tmp_path: Path) -> None:
    paths = storage.prepare_disks(_vmi(), "ns_s", str(tmp_path), default_size="3Mi")
    root = _info(paths["root"])
    assert root["virtual-size"] == 3 * 1024 * 1024 and "backing-filename" not in root
