"""One libvirtd per node on this machine, for the `qemu` hypervisor mode.

Each node's libvirtd runs in its own mount namespace (ops/node_reaper.py) where the node's
directories are bind-mounted over libvirt's fixed paths, so several "nodes" on one machine
keep separate configs, domains, pidfiles and logs. The socket dir is outside the namespace
(`<base>/<node>/sock`), so clients and the other nodes' libvirtds (peer-to-peer migration)
reach it as `qemu+unix:///system?socket=<base>/<node>/sock/libvirt-sock`.

Layout of `<base>/<node>/`:
    etc/ lib/ run/ cache/ log/   bind-mounted over /etc/libvirt, /var/lib/libvirt, ...
    sock/                        libvirt-sock, libvirt-admin-sock (outside the namespace)
    runtime.json                 reaper pid, libvirtd pid, mount namespace id (for cleanup)
    reaper.log                   libvirtd's and the reaper's stdout/stderr

QEMU's pidfiles are at `<base>/<node>/run/qemu/<domain>.pid` (libvirt writes them to
/run/libvirt/qemu inside the namespace): that is `NodeRuntime.qemu_pid_dir`.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import msgspec

from host.procs import pid_alive
from ops.node_reaper import mount_namespace_id

REQUIRED_PACKAGES = (
    "qemu-system-x86",
    "libvirt-daemon",
    "libvirt-daemon-driver-qemu",
    "qemu-utils",
)
INSTALL_COMMAND = "apt-get install -y " + " ".join(REQUIRED_PACKAGES)
LIBVIRTD = "/usr/sbin/libvirtd"
QEMU_DRIVER = "/usr/lib/x86_64-linux-gnu/libvirt/connection-driver/libvirt_driver_qemu.so"

#: libvirt's fixed paths → the node dir's subdirectory mounted over each.
MOUNTS = {
    "/etc/libvirt": "etc",
    "/var/lib/libvirt": "lib",
    "/run/libvirt": "run",
    "/var/cache/libvirt": "cache",
    "/var/log/libvirt": "log",
}
STATE_FILE = "runtime.json"
#: Each node gets its own block of migration ports (QEMU's incoming listener).
MIGRATION_PORT_BASE = 49152
MIGRATION_PORTS_PER_NODE = 64
START_TIMEOUT_SECONDS = 20.0


class QemuPackagesMissing(RuntimeError):
    """The host lacks what qemu mode needs; the message names the command that installs it."""


class RuntimeState(msgspec.Struct, kw_only=True):
    reaper_pid: int
    child_pid: int
    mount_namespace: str


def missing_requirements() -> list[str]:
    """What qemu mode needs and this host lacks (empty when all is there)."""
    missing = []
    if not os.access(LIBVIRTD, os.X_OK):
        missing.append(LIBVIRTD)
    if not Path(QEMU_DRIVER).exists():
        missing.append("libvirt's QEMU driver")
    for binary in ("qemu-system-x86_64", "qemu-img"):
        if shutil.which(binary) is None:
            missing.append(binary)
    return missing


def check_requirements() -> None:
    missing = missing_requirements()
    if missing:
        raise QemuPackagesMissing(
            f"the qemu hypervisor mode needs {', '.join(missing)}; install with: "
            f"{INSTALL_COMMAND} (or: VIRTSTREAM_QEMU=1 bash ops/install.sh)"
        )
    if os.geteuid() != 0:
        raise PermissionError("the qemu hypervisor mode runs libvirtd as root (mount namespaces)")


def ensure_accounts() -> None:
    """Debian's libvirt QEMU driver refuses to load without these, even when QEMU runs as
    root; libvirt-daemon-system would create them, libvirt-daemon alone does not."""
    for group in ("kvm", "libvirt-qemu"):
        try:
            grp.getgrnam(group)
        except KeyError:
            subprocess.run(["groupadd", "--system", group], check=True)
    try:
        pwd.getpwnam("libvirt-qemu")
    except KeyError:
        subprocess.run(
            [
                "useradd", "--system", "--gid", "libvirt-qemu", "--groups", "kvm",
                "--home-dir", "/var/lib/libvirt", "--no-create-home",
                "--shell", "/usr/sbin/nologin", "libvirt-qemu",
            ],
            check=True,
        )  # fmt: skip


def connect_uri(socket_dir: str | os.PathLike[str]) -> str:
    return f"qemu+unix:///system?socket={Path(socket_dir) / 'libvirt-sock'}"


def node_index(node: str) -> int:
    """node-3 → 3 (the port block); other names hash into a block."""
    tail = node.rsplit("-", 1)[-1]
    if tail.isdigit():
        return int(tail)
    return int(uuid.uuid5(uuid.NAMESPACE_DNS, node).int % 200) + 1


class NodeRuntime:
    """A node's libvirtd: `start()` returns its connect URI, `stop()` leaves nothing behind."""

    def __init__(
        self,
        node: str,
        base_dir: str | os.PathLike[str],
        *,
        migration_ports: tuple[int, int] | None = None,
        python: str = sys.executable,
    ) -> None:
        self.node = node
        self.node_dir = Path(base_dir).resolve() / node
        self.socket_dir = self.node_dir / "sock"
        self.uri = connect_uri(self.socket_dir)
        if migration_ports is None:
            first = MIGRATION_PORT_BASE + (node_index(node) % 200) * MIGRATION_PORTS_PER_NODE
            migration_ports = (first, first + MIGRATION_PORTS_PER_NODE - 1)
        self.migration_ports = migration_ports
        self._python = python
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def qemu_pid_dir(self) -> Path:
        """Where libvirt writes `<domain>.pid` for each running QEMU of this node."""
        return self.node_dir / "run" / "qemu"

    @property
    def host_uuid(self) -> str:
        # Stable per node dir, distinct per node: libvirt refuses to migrate to "itself".
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"virtstream-node:{self.node_dir}"))

    def start(self, adopt: bool = True) -> str:
        """Start the node's libvirtd (or adopt the one a previous run left running, with
        its guests, when `adopt` and it answers); returns the connect URI."""
        check_requirements()
        ensure_accounts()
        if adopt and self._responsive_leftover():
            return self.uri
        cleanup_node(self.node_dir)
        self._write_config()
        log = open(self.node_dir / "reaper.log", "ab")  # noqa: SIM115 (handed to the child)
        state_file = str(self.node_dir / STATE_FILE)
        command = [self._python, "-m", "ops.node_reaper", "--state", state_file]
        for target, sub in MOUNTS.items():
            command += ["--bind", f"{self.node_dir / sub}:{target}"]
        command += ["--", LIBVIRTD, "--pid-file", str(self.node_dir / "libvirtd.pid")]
        try:
            self._proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(Path(__file__).resolve().parents[1]),
                start_new_session=True,  # a Ctrl-C of the caller's terminal is not libvirtd's
            )
        finally:
            log.close()
        self._wait_ready()
        return self.uri

    def stop(self, timeout: float = 15.0) -> None:
        """Destroy and undefine every domain, stop libvirtd, and remove what it left."""
        _destroy_all_domains(self.uri)
        state = read_state(self.node_dir)
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)
        elif state is not None and pid_alive(state.reaper_pid):
            os.kill(state.reaper_pid, signal.SIGTERM)
            _wait_gone([state.reaper_pid], timeout)
        self._proc = None
        cleanup_node(self.node_dir)

    def _responsive_leftover(self) -> bool:
        state = read_state(self.node_dir)
        if state is None or not pid_alive(state.reaper_pid):
            return False
        try:
            _open(self.uri).close()
        except Exception:
            return False
        return True

    def _write_config(self) -> None:
        for sub in (*MOUNTS.values(), "sock"):
            (self.node_dir / sub).mkdir(parents=True, exist_ok=True)
        etc = self.node_dir / "etc"
        (etc / "libvirtd.conf").write_text(
            f'unix_sock_dir = "{self.socket_dir}"\n'
            'unix_sock_rw_perms = "0700"\n'
            'auth_unix_rw = "none"\n'
            'auth_unix_ro = "none"\n'
            f'host_uuid = "{self.host_uuid}"\n'
            'log_outputs = "3:file:/var/log/libvirt/libvirtd.log"\n'
        )
        low, high = self.migration_ports
        (etc / "qemu.conf").write_text(
            'user = "root"\n'
            'group = "root"\n'
            # No SELinux/AppArmor labels, no cgroups, no private /dev: none of them work (or
            # are needed) for several root libvirtds on one machine, possibly in a container.
            'security_driver = "none"\n'
            "cgroup_controllers = [ ]\n"
            "namespaces = [ ]\n"
            "dynamic_ownership = 0\n"
            "remember_owner = 0\n"
            # QEMU's output to a file: no virtlogd daemon to run per node.
            'stdio_handler = "file"\n'
            f"migration_port_min = {low}\n"
            f"migration_port_max = {high}\n"
        )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        sock = self.socket_dir / "libvirt-sock"
        last_error = ""
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"libvirtd of {self.node} exited with {self._proc.returncode}; "
                    f"see {self.node_dir / 'reaper.log'} and {self.node_dir / 'log'}"
                )
            if sock.exists():
                try:
                    _open(self.uri).close()
                    return
                except Exception as exc:
                    last_error = str(exc)
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"libvirtd of {self.node} not ready in time: {last_error}")


def read_state(node_dir: Path) -> RuntimeState | None:
    try:
        return msgspec.json.decode((node_dir / STATE_FILE).read_bytes(), type=RuntimeState)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def processes_in_namespace(namespace: str) -> list[int]:
    """Pids whose mount namespace is `namespace` (e.g. 'mnt:[4026532301]')."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if mount_namespace_id(entry.name) == namespace:
                    pids.append(int(entry.name))
    return pids


def cleanup_node(node_dir: Path) -> None:
    """Kill whatever a previous run of this node left (libvirtd, QEMU, the reaper), which
    also drops its mount namespace and mounts, and remove its domains and runtime state."""
    state = read_state(node_dir)
    if state is not None:
        pids = processes_in_namespace(state.mount_namespace)
        # The reaper first: it would otherwise respawn nothing, but reap our kills noisily.
        if pid_alive(state.reaper_pid) and state.reaper_pid not in pids:
            pids.append(state.reaper_pid)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _wait_gone(pids, 5.0)
    # Persistent domain definitions, QEMU pidfiles and sockets, libvirtd's state: a fresh
    # libvirtd must not bring back domains of a run that is over.
    for sub in ("etc", "lib", "run", "sock"):  # cache/ keeps QEMU capabilities: faster start
        shutil.rmtree(node_dir / sub, ignore_errors=True)
    for name in (STATE_FILE, "libvirtd.pid"):
        with contextlib.suppress(FileNotFoundError):
            (node_dir / name).unlink()


def cleanup_stale(base_dir: str | os.PathLike[str]) -> list[str]:
    """Clean up every node a crashed previous run left under base_dir; returns their names."""
    base = Path(base_dir)
    cleaned: list[str] = []
    if not base.is_dir():
        return cleaned
    for node_dir in sorted(p for p in base.iterdir() if (p / STATE_FILE).exists()):
        cleanup_node(node_dir)
        cleaned.append(node_dir.name)
    return cleaned


def _open(uri: str) -> Any:
    import libvirt

    libvirt.registerErrorHandler(lambda *_: None, None)
    return libvirt.open(uri)


def _destroy_all_domains(uri: str) -> None:
    import libvirt

    try:
        conn = libvirt.open(uri)
    except libvirt.libvirtError:
        return
    try:
        for dom in conn.listAllDomains():
            with contextlib.suppress(libvirt.libvirtError):
                if dom.isActive():
                    dom.destroy()
            with contextlib.suppress(libvirt.libvirtError):
                dom.undefine()
    finally:
        conn.close()


def _wait_gone(pids: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
