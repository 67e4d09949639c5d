"""cloud-config rendered for the guest's busybox init (services/launcher/cloud_config.py)
and the seed disks' files (NoCloud, ConfigDrive)."""

from __future__ import annotations

import base64
import gzip
import json
import shlex
import subprocess

from services.launcher import cloud_config, images, storage

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHx0 user@host"
USER_DATA = f"""#cloud-config
hostname: web-1
fqdn: web-1.example.org
users:
  - default
  - name: alice
    sudo: ALL=(ALL) NOPASSWD:ALL
    groups: wheel
    plain_text_passwd: s3cret
    lock_passwd: false
    ssh_authorized_keys:
      - {KEY}
ssh_authorized_keys:
  - {KEY}
write_files:
  - path: /etc/motd.d/hello
    content: hello from cloud-init
    permissions: '0600'
  - path: /opt/data.bin
    encoding: gz+b64
    content: {base64.b64encode(gzip.compress(b"zipped")).decode()}
  - path: /var/late
    content: written last
    defer: true
bootcmd:
  - echo early
runcmd:
  - [sh, -c, 'echo "it is $(hostname)"']
  - echo done
packages: [nginx]
"""


def test_cloud_config_becomes_a_boot_and_a_final_script() -> None:
    boot, final = cloud_config.render(cloud_config.parse(USER_DATA))
    assert "echo 'cloud-init: ignored: packages'" in boot
    assert boot.index("echo early") < boot.index("hostname web-1")  # bootcmd first
    assert "echo '127.0.1.1 web-1.example.org web-1' >> /etc/hosts" in boot
    assert "add_user alice /home/alice /bin/sh ''" in boot
    assert "add_to_group alice wheel" in boot
    assert """set_password alice "$(mkpasswd -m sha512 s3cret)\"""" in boot
    encoded = base64.b64encode(f"{KEY}\n".encode()).decode()
    assert f"echo {encoded} | base64 -d >> /home/alice/.ssh/authorized_keys" in boot
    assert f"echo {encoded} | base64 -d >> /root/.ssh/authorized_keys" in boot
    hello = base64.b64encode(b"hello from cloud-init").decode()
    assert f"echo {hello} | base64 -d > /etc/motd.d/hello" in boot
    assert "chmod 0600 /etc/motd.d/hello" in boot
    assert base64.b64encode(b"zipped").decode() in boot  # decoded on the host
    assert "/var/late" not in boot and "/var/late" in final  # deferred
    assert shlex.join(["sh", "-c", 'echo "it is $(hostname)"']) in final
    assert final.index("/var/late") < final.index("echo done")


def test_the_rendered_scripts_are_valid_shell() -> None:
    for script in cloud_config.render(cloud_config.parse(USER_DATA)):
        assert subprocess.run(["sh", "-n"], input=script, text=True).returncode == 0


def test_a_locked_user_by_default_and_kubevirts_password_forms() -> None:
    boot, _ = cloud_config.render(
        cloud_config.parse(
            "#cloud-config\nusers:\n  - name: bob\npassword: fedora\n"
            "chpasswd:\n  list: |\n    carol:$6$salt$hash\n  expire: false\n"
        )
    )
    assert "set_password bob '!'" in boot  # cloud-init locks a new user's password
    assert 'set_password root "$(mkpasswd -m sha512 fedora)"' in boot
    assert "set_password carol '$6$salt$hash'" in boot


def test_the_seed_is_nocloud_or_config_drive_with_the_rendered_scripts() -> None:
    vmi = {"metadata": {"name": "vm1", "namespace": "ns"}, "spec": {"hostname": "box"}}
    source = {"userData": "#cloud-config\nruncmd: [echo hi]\n"}
    nocloud = storage.seed_files(source, vmi, config_drive=False)
    assert nocloud["meta-data"] == "instance-id: vm1.ns\nlocal-hostname: box\n"
    assert nocloud["user-data"] == source["userData"]
    assert "echo hi" in nocloud["virtstream/final.sh"]
    drive = storage.seed_files(source, vmi, config_drive=True)
    assert json.loads(drive["openstack/latest/meta_data.json"]) == {
        "uuid": "vm1.ns", "hostname": "box", "name": "vm1"
    }  # fmt: skip
    assert drive["openstack/latest/user_data"] == source["userData"]
    script = storage.seed_files({"userData": "#!/bin/sh\necho x\n"}, vmi, config_drive=False)
    assert "virtstream/boot.sh" not in script  # a script runs as it is


def test_the_images_default_user_gets_the_keys_sudo_and_the_password() -> None:
    # cloud-init's `users: [default]` (its default) on CentOS Stream's cloud image
    user = images.default_user("quay.io/containerdisks/centos-stream:9")
    assert user.name == "cloud-user"
    boot, _ = cloud_config.render(
        cloud_config.parse(f"#cloud-config\npassword: pw\nssh_authorized_keys: [{KEY}]\n"), user
    )
    assert "add_user cloud-user /home/cloud-user /bin/sh 'Cloud User'" in boot
    assert "add_to_group cloud-user adm" in boot
    sudo = base64.b64encode(b"cloud-user ALL=(ALL) NOPASSWD:ALL\n").decode()
    assert f"echo {sudo} | base64 -d > /etc/sudoers.d/cloud-user" in boot
    encoded = base64.b64encode(f"{KEY}\n".encode()).decode()
    assert f"echo {encoded} | base64 -d >> /home/cloud-user/.ssh/authorized_keys" in boot
    assert f"echo {encoded} | base64 -d >> /root/.ssh/authorized_keys" in boot
    assert """set_password cloud-user "$(mkpasswd -m sha512 pw)\"""" in boot
    assert subprocess.run(["sh", "-n"], input=boot, text=True).returncode == 0
    # `disable_root: true` keeps root's keys out; a `users` list without `default` no user
    boot, _ = cloud_config.render({"ssh_authorized_keys": [KEY], "disable_root": True}, user)
    assert "/root/.ssh" not in boot and "/home/cloud-user/.ssh" in boot
    boot, _ = cloud_config.render({"users": [{"name": "bob"}]}, user)
    assert "cloud-user" not in boot and "add_user bob" in boot
    for image, name in (("fedora", "fedora"), ("ubuntu:24.04", "ubuntu"), ("x/debian", "debian")):
        assert images.default_user(image).name == name
    assert images.default_user("registry/my-own-image") == images.ROOT


def test_a_script_seed_still_makes_the_images_default_user() -> None:
    vmi = {
        "metadata": {"name": "vm1", "namespace": "ns"},
        "spec": {
            "volumes": [
                {"name": "d", "containerDisk": {"image": "quay.io/containerdisks/fedora:41"}}
            ]
        },
    }
    files = storage.seed_files({"userData": "#!/bin/sh\necho x\n"}, vmi, config_drive=False)
    assert "add_user fedora /home/fedora" in files["virtstream/boot.sh"]
