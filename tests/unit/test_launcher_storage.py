"""Disk preparation for qemu mode: the image catalogue, overlays, kernel boot, NoCloud ISO."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from events.catalog import ERR_IMAGE_PULL
from projections import claims
from services.launcher import images, storage
from services.launcher.domain_xml import DomainType, build_domain_xml

needs_qemu_img = pytest.mark.skipif(shutil.which("qemu-img") is None, reason="needs qemu-img")


def test_image_name_is_the_references_last_segment_without_tag_or_digest() -> None:
    assert images.image_name("registry:5000/kubevirt/cirros-container-disk-demo:devel") == (
        "cirros-container-disk-demo"
    )
    assert images.image_name("quay.io/containerdisks/fedora@sha256:abc") == "fedora"
    assert images.image_name("cirros") == "cirros"


def test_find_disk_image_tries_the_name_with_common_suffixes(tmp_path: Path) -> None:
    (tmp_path / "fedora.qcow2").write_bytes(b"")
    found = images.find_disk_image(tmp_path, "quay.io/containerdisks/fedora:39")
    assert found == tmp_path / "fedora.qcow2"


def test_an_image_not_in_the_catalogue_is_an_image_pull_error(tmp_path: Path) -> None:
    with pytest.raises(images.ErrImagePull) as caught:
        images.find_disk_image(tmp_path, "quay.io/kubevirt/nothing-here:v1")
    assert 'failed to pull image "quay.io/kubevirt/nothing-here:v1"' in str(caught.value)
    assert "virtstream images" in str(caught.value)


def test_kernel_boot_takes_the_paths_inside_the_container_dir(tmp_path: Path) -> None:
    boot = tmp_path / "kernels" / "boot"
    boot.mkdir(parents=True)
    (boot / "vmlinuz-virt").write_bytes(b"k")
    (boot / "initramfs-virt").write_bytes(b"i")
    vmi = {
        "spec": {
            "domain": {
                "firmware": {
                    "kernelBoot": {
                        "container": {
                            "image": "registry:5000/kubevirt/kernels:devel",
                            "kernelPath": "/boot/vmlinuz-virt",
                            "initrdPath": "/boot/initramfs-virt",
                        },
                        "kernelArgs": "console=ttyS0",
                    }
                }
            }
        }
    }
    found = storage.kernel_boot(vmi, str(tmp_path))
    assert found == images.KernelBoot(
        boot / "vmlinuz-virt", boot / "initramfs-virt", "console=ttyS0"
    )
    xml = build_domain_xml(
        {**vmi, "metadata": {"name": "k"}, "spec": {**vmi["spec"], "domain": {
            **vmi["spec"]["domain"], "memory": {"guest": "64Mi"}}}},
        domain_type=DomainType.QEMU,
        kernel_boot=found,
    )  # fmt: skip
    assert f"<kernel>{boot / 'vmlinuz-virt'}</kernel>" in xml
    assert "<cmdline>console=ttyS0</cmdline>" in xml
    (boot / "initramfs-virt").unlink()
    with pytest.raises(images.ErrImagePull, match="no file /boot/initramfs-virt"):
        storage.kernel_boot(vmi, str(tmp_path))


def test_the_catalogue_lists_disks_kernel_dirs_and_aliases(tmp_path: Path) -> None:
    (tmp_path / "guest.raw").write_bytes(b"x" * 10)
    (tmp_path / "cirros.raw").symlink_to("guest.raw")
    (tmp_path / "kern" / "boot").mkdir(parents=True)
    (tmp_path / ".stamp.json").write_text("{}")
    listed = {(e.name, e.kind, e.alias_of) for e in images.catalogue(tmp_path)}
    assert listed == {("guest", "disk", None), ("cirros", "disk", "guest.raw"),
                      ("kern", "kernel", None)}  # fmt: skip


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
def test_without_an_image_nothing_is_created(tmp_path: Path) -> None:
    with pytest.raises(images.ErrImagePull):
        storage.prepare_disks(_vmi(), "ns_s", str(tmp_path / "disks"), image_dir=str(tmp_path))
    assert not (tmp_path / "disks").exists()


@needs_qemu_img
def test_the_seed_carries_kubevirts_meta_data_and_decoded_user_data(tmp_path: Path) -> None:
    if storage.iso_tool() is None:
        pytest.skip("no ISO tool")
    vmi = _vmi()
    vmi["spec"]["hostname"] = "myhost"  # type: ignore[index]
    vmi["spec"]["volumes"][2] = {  # type: ignore[index]
        "name": "seed",
        "cloudInitNoCloud": {"userDataBase64": base64.b64encode(b"#!/bin/sh\necho hi\n").decode()},
    }
    (tmp_path / "base.raw").write_bytes(b"")
    paths = storage.prepare_disks(vmi, "ns_s", str(tmp_path / "disks"), image_dir=str(tmp_path))
    iso = Path(paths["seed"]).read_bytes()
    assert b"instance-id: s.ns\nlocal-hostname: myhost\n" in iso
    assert b"#!/bin/sh\necho hi\n" in iso


def test_the_image_pull_error_is_named_as_the_fold_expects() -> None:
    # the launcher reports "<exception name>: <message>"; the VMI fold keys on the name
    assert images.ErrImagePull.__name__ == ERR_IMAGE_PULL


DV_VM = {
    "metadata": {"name": "vm1", "namespace": "ns"},
    "spec": {
        "dataVolumeTemplates": [
            {"metadata": {"name": "vm1-root"},
             "spec": {"storage": {"resources": {"requests": {"storage": "5Gi"}}}}},
            {"metadata": {"name": "vm1-old"},
             "spec": {"pvc": {"resources": {"requests": {"storage": "3Gi"}}}}},
        ]
    },
}  # fmt: skip


def _claims_vmi() -> dict[str, object]:
    return {
        "metadata": {"name": "vm1", "namespace": "ns"},
        "spec": {
            "domain": {"devices": {"disks": [{"name": "root"}, {"name": "old"}, {"name": "x"}]}},
            "volumes": [
                {"name": "root", "dataVolume": {"name": "vm1-root"}},
                {"name": "old", "persistentVolumeClaim": {"claimName": "vm1-old"}},
                {"name": "x", "persistentVolumeClaim": {"claimName": "standalone"}},
            ],
        },
    }


def test_a_data_volume_templates_size_is_its_claims_size_for_the_pod() -> None:
    vmi = _claims_vmi()
    sizes = claims.claim_sizes(vmi, DV_VM)
    assert sizes == {"vm1-root": "5Gi", "vm1-old": "3Gi"}
    pod = claims.with_claim_sizes(vmi, sizes)
    assert claims.sizes_of(pod) == sizes
    assert claims.sizes_of(vmi) == {}  # the VMI itself is unchanged
    assert claims.with_claim_sizes(vmi, {}) is vmi


@needs_qemu_img
def test_a_claim_is_created_at_the_size_its_template_requests(tmp_path: Path) -> None:
    pod = claims.with_claim_sizes(_claims_vmi(), claims.claim_sizes(_claims_vmi(), DV_VM))
    paths = storage.prepare_disks(pod, "ns_vm1", str(tmp_path / "disks"))
    assert _info(paths["root"])["virtual-size"] == 5 * 2**30
    assert _info(paths["old"])["virtual-size"] == 3 * 2**30
    assert _info(paths["x"])["virtual-size"] == 2**30  # no template: the default
