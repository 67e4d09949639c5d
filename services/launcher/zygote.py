"""Launcher fork server ("zygote"): one per handler, forks a launcher per VMI.

A fresh interpreter importing libvirt + msgspec costs ~100 ms and ~45 MB; a child forked
from a process that has already imported them starts in ~2 ms and shares those pages
copy-on-write. The zygote therefore imports everything a launcher needs, runs a few
whole launchers to warm their code paths (see _warm_launcher), and then only forks. It
must stay a clean template: single-threaded, no asyncio loop, no libvirt connection or
event implementation (each child opens its own; the warm-up's are closed, and it never
registers one), so it serves with a plain blocking socket.

Children call setsid(): they outlive the zygote and the handler (a VM never restarts
because its handler did). The zygote itself dies with its handler (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import gc
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from types import FrameType
from typing import Any

import libvirt
import msgspec

from events.catalog import Attachment
from services.launcher import rundir
from services.launcher.domain_state import DomainEvent, StateReason
from services.launcher.domain_xml import DEFAULT_DISK_DIR, DomainType
from services.launcher.hypervisor import (
    TEST_URI,
    EventCallback,
    LibvirtHypervisor,
    connect_uri,
)

log = logging.getLogger("virtstream.launcher.zygote")

_LISTEN_FD = 3  # where a child finds its listening socket
_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
_LIBC = ctypes.CDLL(None)  # loaded once, in the zygote, shared by every child


class SpawnRequest(msgspec.Struct, kw_only=True):
    #: The VirtualMachineInstance as JSON, passed through undecoded.
    vmi: msgspec.Raw
    socket_path: str
    hypervisor_uri: str = TEST_URI
    domain_type: DomainType = DomainType.TEST
    emulator: str | None = None
    disk_dir: str = DEFAULT_DISK_DIR
    disk_paths: dict[str, str] = {}
    #: Where the child's stdout/stderr go; default `<socket minus .sock>.log`.
    log_path: str | None = None
    # qemu mode (see LauncherConfig)
    image_dir: str | None = None
    default_disk_size: str | None = None
    qemu_pid_dir: str | None = None
    migration_target: bool = False
    pod_network_dir: str | None = None
    node: str = ""
    pod_address: str = ""
    attachments: tuple[Attachment, ...] = ()


class SpawnReply(msgspec.Struct, kw_only=True):
    pid: int = 0
    error: str | None = None


class SpawnError(RuntimeError):
    pass


WARM_UP_VMI = (
    b'{"metadata": {"name": "warm-up", "namespace": "zygote", "uid": "0"}, "spec": {"domain":'
    b' {"cpu": {"cores": 1}, "memory": {"guest": "64Mi"}, "devices": {"disks": [{"name": "d",'
    b' "disk": {"bus": "virtio"}}, {"name": "c", "cdrom": {"bus": "sata"}}], "interfaces":'
    b' [{"name": "default", "macAddress": "02:00:00:00:00:01", "masquerade": {}}]}}}}'
)


_request_decoder = msgspec.json.Decoder(SpawnRequest)
_reply_decoder = msgspec.json.Decoder(SpawnReply)
_encoder = msgspec.json.Encoder()


# -- client side (the handler) ------------------------------------------------------------


def spawn_launcher(
    zygote_socket: str,
    vmi_json: bytes | str,
    launcher_socket: str,
    *,
    hypervisor_uri: str = TEST_URI,
    domain_type: DomainType = DomainType.TEST,
    emulator: str | None = None,
    disk_dir: str = DEFAULT_DISK_DIR,
    disk_paths: dict[str, str] | None = None,
    image_dir: str | None = None,
    default_disk_size: str | None = None,
    qemu_pid_dir: str | None = None,
    migration_target: bool = False,
    pod_network_dir: str | None = None,
    node: str = "",
    pod_address: str = "",
    attachments: tuple[Attachment, ...] = (),
    timeout: float = 5.0,
) -> int:
    """Ask the zygote for a launcher; returns its pid (blocks ~2 ms).

    The launcher's socket listens when this returns (the zygote binds it before the fork):
    LauncherClient.connect gets through at once and waits for the launcher's Hello.
    """
    raw = vmi_json.encode() if isinstance(vmi_json, str) else vmi_json
    request = SpawnRequest(
        vmi=msgspec.Raw(raw),
        socket_path=str(launcher_socket),
        hypervisor_uri=hypervisor_uri,
        domain_type=domain_type,
        emulator=emulator,
        disk_dir=disk_dir,
        disk_paths=disk_paths or {},
        image_dir=image_dir,
        default_disk_size=default_disk_size,
        qemu_pid_dir=qemu_pid_dir,
        migration_target=migration_target,
        pod_network_dir=pod_network_dir,
        node=node,
        pod_address=pod_address,
        attachments=attachments,
    )
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        conn.connect(str(zygote_socket))
        conn.sendall(_encoder.encode(request) + b"\n")
        reply = _reply_decoder.decode(_read_line(conn))
    if reply.error is not None:
        raise SpawnError(reply.error)
    return reply.pid


def start_zygote(
    socket_path: str, *, python: str = sys.executable, timeout: float = 10.0
) -> subprocess.Popen[bytes]:
    """Start a zygote process (dies with the calling process) and wait until it serves."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(socket_path)
    proc = subprocess.Popen(
        [python, "-m", "services.launcher.zygote", "--socket", str(socket_path)],
        cwd=str(Path(__file__).resolve().parents[2]),
    )
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(str(socket_path))
                return proc
            except (FileNotFoundError, ConnectionRefusedError):
                pass
        if proc.poll() is not None:
            raise SpawnError(f"zygote exited with {proc.returncode}")
        if time.monotonic() > deadline:
            proc.kill()
            raise SpawnError(f"zygote did not listen on {socket_path} within {timeout}s")
        time.sleep(0.01)


def _read_line(conn: socket.socket) -> bytes:
    chunks = []
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
        if chunk.endswith(b"\n"):
            break
    return b"".join(chunks)


# -- server side (the zygote process) ------------------------------------------------------


def preload() -> None:
    """Import everything a launcher child uses, so the child shares it copy-on-write."""
    import asyncio.unix_events  # noqa: F401

    import libvirt  # noqa: F401
    import libvirtaio  # noqa: F401
    import setproctitle  # noqa: F401

    from services.launcher import client, process  # noqa: F401

    _warm_up()
    _warm_launcher()


def _warm_up() -> None:
    """Run the launcher's pure code paths once, so their lazy state (compiled regexes,
    specialised bytecode, caches) is built here and shared, not rebuilt in every child."""
    from services.launcher import protocol
    from services.launcher.domain_xml import build_domain_xml
    from services.launcher.process import LauncherConfig

    vmi = msgspec.json.decode(WARM_UP_VMI)
    state = protocol.DomainStatus(state=protocol.DomainState.RUNNING)
    reports: list[protocol.Report] = [
        protocol.Hello(vmi_uid="0", domain_name="zygote_warm-up", pid=0),
        state,
        protocol.CommandResult(id=1, ok=True, status=state),
    ]
    for _ in range(10):  # enough calls for the interpreter to specialise the hot paths
        _walk_lifecycle()
        build_domain_xml(vmi)
        LauncherConfig(vmi=vmi, socket_path="/nonexistent")
        for report in reports:
            protocol.decode_report(protocol.encode(report))
        protocol.decode_command(protocol.encode(protocol.Start()))


#: Runs of the warm-up launcher: CPython quickens a function after 8 calls, and a quickened
#: function runs without writing to its code object (counters, inline caches).
_WARM_UP_RUNS = 10


class WarmUpHypervisor(LibvirtHypervisor):
    """The test driver without libvirt's event implementation, which a process gets only
    once and the zygote must leave to its children: the lifecycle events a call causes are
    delivered on the loop right after it instead."""

    def open(self, on_event: EventCallback) -> None:
        self._on_event = on_event
        self._conn = self._call(libvirt.open, connect_uri(self.uri))

    def start(self, paused: bool = False) -> None:
        super().start(paused)
        self._deliver(DomainEvent.STARTED, StateReason.BOOTED)

    def shutdown(self) -> None:
        super().shutdown()
        self._deliver(DomainEvent.STOPPED, StateReason.SHUTDOWN)

    def destroy(self) -> None:
        super().destroy()
        self._deliver(DomainEvent.STOPPED, StateReason.DESTROYED)

    def _deliver(self, event: DomainEvent, reason: StateReason) -> None:
        if self._on_event is not None:
            asyncio.get_running_loop().call_soon(self._on_event, event, reason)


def _warm_launcher() -> None:
    """Run whole launchers (the test driver, a socket, a handler's Start, Running and
    Shutdown) in the zygote, a few times, each on its own loop, closed afterwards: the
    asyncio, socket, logging and libvirt paths a child runs are then specialised and their
    lazy state built here, shared, instead of written into every child (measured: ~0.5 MiB
    less USS per launcher, and fewer copy-on-write faults). Also libvirt's process-wide
    state, built on the first connection. Best effort: a failure costs memory, not
    correctness."""
    from services.launcher.process import LauncherConfig

    launcher_log = logging.getLogger("virtstream.launcher")
    propagate, launcher_log.propagate = launcher_log.propagate, False
    # The same formatting path as a child's log, into nothing.
    sink = logging.StreamHandler(open(os.devnull, "w"))  # noqa: SIM115 (closed below)
    sink.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    launcher_log.addHandler(sink)
    try:
        with tempfile.TemporaryDirectory(prefix="virtstream-zygote-") as tmp:
            vmi = msgspec.json.decode(WARM_UP_VMI)
            deadline = time.monotonic() + 3.0  # a starved machine gets a shorter warm-up
            for _ in range(_WARM_UP_RUNS):
                if time.monotonic() > deadline:
                    break
                config = LauncherConfig(vmi=vmi, socket_path=f"{tmp}/zygote_warm-up.sock")
                asyncio.run(_drive_launcher(config, timeout=3.0))
    except Exception as exc:  # an optimisation: the zygote serves anyway
        log.warning("launcher warm-up failed: %s: %s", type(exc).__name__, exc)
    finally:
        launcher_log.removeHandler(sink)
        sink.close()
        launcher_log.propagate = propagate


async def _drive_launcher(config: Any, timeout: float) -> None:
    from services.launcher.client import LauncherClient
    from services.launcher.domain_state import DomainState
    from services.launcher.process import Launcher
    from services.launcher.protocol import Shutdown, Start

    async with asyncio.timeout(timeout):
        launcher = Launcher(config, WarmUpHypervisor(config.hypervisor_uri))
        running = asyncio.get_running_loop().create_task(launcher.run())
        client = await LauncherClient.connect(config.socket_path)
        await client.call(Start())
        await client.wait_for(lambda s: s.state is DomainState.RUNNING)
        await client.call(Shutdown(grace_period_seconds=0))
        await client.wait_for(lambda s: s.final)
        await client.close()
        await running


def _walk_lifecycle() -> None:
    """A launcher's usual life through the pure machine (boot, a handler, Start, Running,
    a graceful shutdown, the end), so its classes' and functions' lazy state is the
    zygote's, shared, not written into every child's copy."""
    from services.launcher import lifecycle as lc
    from services.launcher import protocol
    from services.launcher.domain_state import DomainEvent, DomainState, StateReason

    hello = protocol.Hello(vmi_uid="0", domain_name="zygote_warm-up", pid=0)
    off = lc.Seen(state=DomainState.SHUTOFF, reason=StateReason.UNKNOWN, wall=0.0)
    on = lc.Seen(state=DomainState.RUNNING, reason=StateReason.BOOTED, pid=1, wall=0.0)
    s = lc.initial(
        lc.Settings(
            domain_name="zygote_warm-up",
            hello=hello,
            termination_grace_seconds=1,
            guest_memory_bytes=1 << 26,
        )
    )
    inputs: list[lc.Input] = [
        lc.Boot(),
        lc.SetupDone(now=0.0, seen=off),
        lc.Connected(client=1, seen=off),
        lc.CommandReceived(now=0.0, client=1, command=protocol.Start(id=1), seen=off),
        lc.CallReturned(call=lc.StartDomain(paused=False, reply_to=lc.ReplyTo(1, 1)), seen=on),
        lc.DomainEventSeen(event=DomainEvent.STARTED, reason=StateReason.BOOTED, seen=on),
        lc.CommandReceived(now=0.0, client=1, command=protocol.Status(id=2), seen=on),
        lc.CommandReceived(
            now=0.0, client=1, command=protocol.Shutdown(id=3, grace_period_seconds=1), seen=on
        ),
        lc.DomainEventSeen(event=DomainEvent.STOPPED, reason=StateReason.SHUTDOWN, seen=off),
    ]
    for inp in inputs:
        s, _ = lc.step(s, inp)


def _reap_children(_signum: int, _frame: FrameType | None) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        log.info("launcher pid %d exited with %d", pid, os.waitstatus_to_exitcode(status))


def _set_process_name(name: bytes) -> None:
    _LIBC.prctl(_PR_SET_NAME, ctypes.c_char_p(name[:15]), 0, 0, 0)


def _set_title(vmi: dict[str, Any]) -> None:
    """`virt-launcher <ns>/<name> uid=<uid>` instead of the zygote's command line."""
    from setproctitle import setproctitle

    md = vmi.get("metadata") or {}
    ns, name, uid = md.get("namespace", "default"), md.get("name", "?"), md.get("uid", "")
    setproctitle(f"virt-launcher {ns}/{name}" + (f" uid={uid}" if uid else ""))


def _die_with_parent() -> None:
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() == 1:  # the parent died before prctl took effect
        sys.exit(0)


def serve(socket_path: str) -> None:
    """Run the zygote's accept loop until SIGTERM."""
    preload()
    _die_with_parent()
    signal.signal(signal.SIGCHLD, _reap_children)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with contextlib.suppress(FileNotFoundError):
        os.unlink(socket_path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(128)
    log.info("zygote %d serving on %s", os.getpid(), socket_path)
    try:
        while True:
            conn, _ = listener.accept()
            with conn:
                try:
                    reply = _handle(conn)
                except Exception as exc:  # one bad request must not take the zygote down
                    reply = SpawnReply(error=f"{type(exc).__name__}: {exc}")
                with contextlib.suppress(OSError):
                    conn.sendall(_encoder.encode(reply) + b"\n")
    finally:
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(socket_path)


def _handle(conn: socket.socket) -> SpawnReply:
    conn.settimeout(5.0)
    request = _request_decoder.decode(_read_line(conn))
    vmi = msgspec.json.decode(request.vmi)
    if not isinstance(vmi, dict):
        raise ValueError("the VMI must be a JSON object")
    from services.launcher.process import listen_on

    # The child's socket listens before the reply: the handler connects at once and waits in
    # the backlog for the Hello, rather than polling for a socket while the child starts.
    listener = listen_on(request.socket_path)
    # Objects that exist now are never collected by the child's GC, so its collections
    # do not write to (and thereby un-share) every inherited page.
    gc.freeze()
    sys.stdout.flush()  # or the child would write the zygote's buffered output again
    sys.stderr.flush()
    try:
        pid = os.fork()
        if pid == 0:
            _run_child(request, vmi, listener.fileno())  # never returns
        rundir.write_pidfile(request.socket_path, pid)
    finally:
        listener.close()
    return SpawnReply(pid=pid)


def _run_child(request: SpawnRequest, vmi: dict[str, Any], listen_fd: int) -> None:
    code = 1
    try:
        os.setsid()  # own session: no signals from the handler's terminal or process group
        _set_process_name(b"virt-launcher")  # what ps -o comm / top show, not "python"
        _set_title(vmi)  # what ps -f / pgrep -f show: which VMI this launcher runs
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        # SIGPIPE stays ignored (Python's default): a vanished handler is an EPIPE, not a kill.
        _redirect_stdio(request.log_path or str(rundir.log_path(request.socket_path)))
        os.dup2(listen_fd, _LISTEN_FD)  # the launcher's socket, bound by the zygote
        os.closerange(_LISTEN_FD + 1, os.sysconf("SC_OPEN_MAX"))  # the zygote's own sockets

        from services.launcher.process import LauncherConfig, configure_logging, run_launcher

        configure_logging()
        config = LauncherConfig(
            vmi=vmi,
            socket_path=request.socket_path,
            hypervisor_uri=request.hypervisor_uri,
            domain_type=request.domain_type,
            emulator=request.emulator,
            disk_dir=request.disk_dir,
            disk_paths=request.disk_paths,
            image_dir=request.image_dir,
            qemu_pid_dir=request.qemu_pid_dir,
            migration_target=request.migration_target,
            pod_network_dir=request.pod_network_dir,
            node=request.node,
            pod_address=request.pod_address,
            attachments=request.attachments,
            listen_fd=_LISTEN_FD,
        )
        if request.default_disk_size:
            config.default_disk_size = request.default_disk_size
        code = run_launcher(config)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)  # never unwind into the zygote's accept loop


def _redirect_stdio(log_file: str) -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    out = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="virtstream launcher fork server")
    parser.add_argument("--socket", required=True, help="unix socket to serve spawn requests on")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    serve(args.socket)


if __name__ == "__main__":
    main()
