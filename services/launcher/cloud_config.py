"""cloud-config for the catalogue's guest: the user-data KubeVirt's examples and user guide
use, turned into two shell scripts for the guest's busybox init (pure, no I/O).

The guest is a busybox initramfs with no Python and no YAML parser, so the launcher reads
the `#cloud-config` here (PyYAML) and puts, beside the untouched user-data on the seed
disk, `virtstream/boot.sh` (bootcmd, hostname, users, root's keys and password, write_files)
and `virtstream/final.sh` (deferred write_files, runcmd), which the guest's init runs at
cloud-init's stages: before the network, and once it is up. Keys it does not handle are
named on the console (`cloud-init: ignored: packages`), never silently dropped.

- `hostname`, `fqdn` (the fqdn wins; its first label is the hostname, the whole name goes
  to /etc/hosts), `preserve_hostname`;
- `users` (cloud-init's default: `[default]`): `default`, the image's default user
  (`images.DEFAULT_USERS`: `cloud-user` for CentOS Stream, `fedora`, `ubuntu`, ...; root for
  an image of another name), with passwordless sudo and a locked password; or entries with
  `name`, `gecos`, `homedir`, `shell`, `groups`, `sudo` (recorded in /etc/sudoers.d, the
  guest has no sudo), `passwd`/`hashed_passwd` (a crypt hash), `plain_text_passwd`,
  `lock_passwd` (cloud-init's default: locked), `ssh_authorized_keys`;
- `ssh_authorized_keys` (top level) and `password`: the default user's; the keys are root's
  too unless `disable_root: true` (the console's and `virtstream ssh root@...`'s way in);
  `chpasswd` (`list` or `users`);
- `write_files`: `path`, `content`, `encoding` (b64, base64, gzip, gz, gz+b64, ...; text
  otherwise), `permissions`, `owner`, `append`, `defer`;
- `bootcmd`, `runcmd`: a string runs with sh, a list is a command with its arguments.
"""

from __future__ import annotations

import base64
import gzip
import shlex
from collections.abc import Iterable
from typing import Any

import yaml

from services.launcher.images import ROOT, DefaultUser

HANDLED = frozenset(
    {
        "hostname",
        "fqdn",
        "users",
        "ssh_authorized_keys",
        "password",
        "chpasswd",
        "write_files",
        "bootcmd",
        "runcmd",
        "ssh_pwauth",  # the guest's sshd, when it has one, takes passwords as configured
        "preserve_hostname",
        "manage_etc_hosts",
        "disable_root",
    }
)
_B64 = {"b64", "base64"}
_GZ = {"gz", "gzip"}
_GZ_B64 = {"gz+base64", "gzip+base64", "gz+b64", "gzip+b64"}


class CloudConfigError(ValueError):
    pass


def is_cloud_config(user_data: str) -> bool:
    return user_data.lstrip().startswith("#cloud-config")


def parse(user_data: str) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(user_data)
    except yaml.YAMLError as e:
        raise CloudConfigError(f"user-data is not valid YAML: {e}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise CloudConfigError("#cloud-config user-data must be a mapping")
    return doc


def _q(value: object) -> str:
    return shlex.quote(str(value))


def _command(cmd: object) -> str:
    """A bootcmd/runcmd entry: a string is a shell line, a list a command and arguments."""
    if isinstance(cmd, list):
        return shlex.join(str(a) for a in cmd)
    return str(cmd)


def _content(entry: dict[str, Any]) -> bytes:
    content = entry.get("content", "")
    raw = content.encode() if isinstance(content, str) else bytes(content or b"")
    encoding = str(entry.get("encoding") or "text").lower()
    if encoding in _B64:
        return base64.b64decode(raw)
    if encoding in _GZ:
        return gzip.decompress(raw)
    if encoding in _GZ_B64:
        return gzip.decompress(base64.b64decode(raw))
    return raw


def _write_file(entry: dict[str, Any]) -> list[str]:
    path = entry.get("path")
    if not path:
        return ["echo 'cloud-init: write_files: an entry without a path is skipped'"]
    data = base64.b64encode(_content(entry)).decode()
    redirect = ">>" if entry.get("append") else ">"
    lines = [
        f'mkdir -p "$(dirname {_q(path)})"',
        f"echo {data} | base64 -d {redirect} {_q(path)}",
        f"chmod {_q(entry.get('permissions') or '0644')} {_q(path)}",
    ]
    if owner := entry.get("owner"):
        lines.append(f"chown {_q(owner)} {_q(path)} 2>/dev/null")
    lines.append("echo " + _q(f"cloud-init: wrote {path}"))
    return lines


def _keys(user: str, home: str, keys: Iterable[object]) -> list[str]:
    lines = [str(k).strip() for k in keys if str(k).strip()]
    if not lines:
        return []
    body = base64.b64encode(("\n".join(lines) + "\n").encode()).decode()
    ssh = f"{home}/.ssh"
    return [
        f"mkdir -p {_q(ssh)}",
        f"echo {body} | base64 -d >> {_q(ssh)}/authorized_keys",
        f"chmod 700 {_q(ssh)}; chmod 600 {_q(ssh)}/authorized_keys",
        f'chown -R "$(id -u {_q(user)}):$(id -g {_q(user)})" {_q(ssh)} 2>/dev/null',
        "echo " + _q(f"cloud-init: {len(lines)} ssh key(s) for {user}"),
    ]


def _password(user: str, *, hashed: str | None = None, plain: str | None = None) -> list[str]:
    if hashed is not None:
        value = _q(hashed)
    elif plain is not None:
        value = f'"$(mkpasswd -m sha512 {_q(plain)})"'
    else:
        return []
    # the field of /etc/shadow (busybox has no chpasswd here)
    return [f"set_password {_q(user)} {value}"]


def _default_user(user: DefaultUser) -> list[str]:
    if user == ROOT:
        return []
    entry = {"name": user.name, "gecos": user.gecos, "homedir": user.homedir,
             "groups": list(user.groups), "sudo": "ALL=(ALL) NOPASSWD:ALL"}  # fmt: skip
    return _user(entry, user)


def _user(entry: object, default: DefaultUser) -> list[str]:
    if entry == "default":
        return _default_user(default)
    if not isinstance(entry, dict):
        return []
    name = entry.get("name")
    if not name:
        return ["echo 'cloud-init: users: an entry without a name is skipped'"]
    home = str(entry.get("homedir") or f"/home/{name}")
    shell = str(entry.get("shell") or "/bin/sh")
    lines = []
    if name != "root":
        gecos = entry.get("gecos") or ""
        lines.append(f"add_user {_q(name)} {_q(home)} {_q(shell)} {_q(gecos)}")
    else:
        home = "/root"
    groups = entry.get("groups") or []
    if isinstance(groups, str):
        groups = [g.strip() for g in groups.split(",") if g.strip()]
    for group in groups:
        lines.append(f"add_to_group {_q(name)} {_q(group)}")
    if sudo := entry.get("sudo"):
        rules = sudo if isinstance(sudo, list) else [sudo]
        body = "".join(f"{name} {rule}\n" for rule in rules if rule)
        encoded = base64.b64encode(body.encode()).decode()
        lines.append(f"mkdir -p /etc/sudoers.d; echo {encoded} | base64 -d > /etc/sudoers.d/{name}")
    hashed = entry.get("hashed_passwd") or entry.get("passwd")
    plain = entry.get("plain_text_passwd")
    if hashed or plain:
        lines += _password(name, hashed=hashed, plain=plain)
    elif entry.get("lock_passwd", True):
        lines.append(f"set_password {_q(name)} '!'")
    lines += _keys(name, home, entry.get("ssh_authorized_keys") or [])
    lines.append("echo " + _q(f"cloud-init: user {name}"))
    return lines


def _chpasswd(chpasswd: object) -> list[str]:
    if not isinstance(chpasswd, dict):
        return []
    lines: list[str] = []
    listed = chpasswd.get("list")
    if isinstance(listed, str):
        listed = listed.splitlines()
    for item in listed or []:
        user, _, password = str(item).partition(":")
        if user and password and password != "RANDOM":
            hashed = password.startswith("$")
            lines += _password(user, **({"hashed": password} if hashed else {"plain": password}))
    for user in chpasswd.get("users") or []:
        if isinstance(user, dict) and user.get("name") and user.get("password"):
            kind = user.get("type") or "hash"
            key = "hashed" if kind == "hash" else "plain"
            lines += _password(str(user["name"]), **{key: str(user["password"])})
    return lines


#: the helpers boot.sh uses (this busybox has no adduser, addgroup or chpasswd)
_PRELUDE = """\
next_id() {  # next_id FILE: the first id from 1000 that FILE's third field does not use
  id=1000
  while cut -d: -f3 "$1" | grep -qx "$id"; do id=$((id + 1)); done
  echo "$id"
}
add_user() {  # add_user NAME HOME SHELL GECOS
  grep -q "^$1:" /etc/passwd && return 0
  uid=$(next_id /etc/passwd)
  echo "$1:x:$uid:$uid:$4:$2:$3" >> /etc/passwd
  grep -q "^$1:" /etc/group || echo "$1:x:$uid:" >> /etc/group
  [ -f /etc/shadow ] || : > /etc/shadow
  grep -q "^$1:" /etc/shadow || echo "$1:!:0:0:99999:7:::" >> /etc/shadow
  mkdir -p "$2" && chown "$uid:$uid" "$2"
}
add_to_group() {  # add_to_group USER GROUP (created if missing)
  grep -q "^$2:" /etc/group || echo "$2:x:$(next_id /etc/group):" >> /etc/group
  awk -F: -v OFS=: -v g="$2" -v u="$1" \\
    '$1 == g { n = split($4, m, ","); for (i = 1; i <= n; i++) if (m[i] == u) { print; next }
               $4 = ($4 == "" ? u : $4 "," u) } { print }' /etc/group \\
    > /etc/group.new && mv /etc/group.new /etc/group
}
set_password() {  # set_password USER HASH: the hash field of USER's /etc/shadow line
  [ -f /etc/shadow ] || : > /etc/shadow
  grep -q "^$1:" /etc/shadow || echo "$1:*:0:0:99999:7:::" >> /etc/shadow
  awk -F: -v OFS=: -v u="$1" -v h="$2" '$1 == u { $2 = h } { print }' /etc/shadow \\
    > /etc/shadow.new && mv /etc/shadow.new /etc/shadow && chmod 600 /etc/shadow
}
"""


def render(config: dict[str, Any], default: DefaultUser = ROOT) -> tuple[str, str]:
    """(boot.sh, final.sh) for a parsed cloud-config, on an image whose default user is
    `default`."""
    boot: list[str] = ["#!/bin/sh", _PRELUDE]
    final: list[str] = ["#!/bin/sh"]
    for key in sorted(set(config) - HANDLED):
        boot.append("echo " + _q(f"cloud-init: ignored: {key}"))
    for cmd in config.get("bootcmd") or []:
        boot.append(_command(cmd))
    name = config.get("fqdn") or config.get("hostname")
    if name and not config.get("preserve_hostname"):
        short = str(name).split(".", 1)[0]
        boot += [
            f"hostname {_q(short)}",
            f"echo {_q(short)} > /etc/hostname",
            f"echo '127.0.1.1 {name} {short}' >> /etc/hosts",
        ]
    users = config.get("users", ["default"]) or []
    for entry in users:
        boot += _user(entry, default)
    keys = config.get("ssh_authorized_keys") or []
    if default != ROOT and "default" in users:
        boot += _keys(default.name, default.homedir, keys)
    if default == ROOT or config.get("disable_root") is not True:
        boot += _keys("root", "/root", keys)
    if password := config.get("password"):
        boot += _password(default.name if "default" in users else "root", plain=str(password))
    boot += _chpasswd(config.get("chpasswd"))
    for entry in config.get("write_files") or []:
        if isinstance(entry, dict):
            (final if entry.get("defer") else boot).extend(_write_file(entry))
    for cmd in config.get("runcmd") or []:
        final.append(_command(cmd))
    return "\n".join(boot) + "\n", "\n".join(final) + "\n"
