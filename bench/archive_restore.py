"""What the archive's subjects cost nats-server's start: one scratch server, one event
stream and its archive both ways, the server restarted, its log's restore times read.

  python -m bench.archive_restore [--events N] [--restarts K] [--store DIR]

N small events (100 bytes) are published over the event stream's subject layout
(`virt.<kind>.<ns>.<name>.<EventType>.<node>`) as a year of the cluster has them: 10
events an aggregate over 7 of its type/node subjects, 4 aggregates interleaved in every 40
events (so 1,000,000 events hold 100,000 aggregates on 700,000 subjects, as the
1,000,000-event history benchmark's archive did). Two mirrors follow it: `FULL`, as
earlier archives were made (the origin's subjects), and `COLLAPSED`, as `archive.ensure`
makes them now (`archive.TRANSFORM`: one subject an aggregate). Once both hold every
event the server is stopped and started K times; each start's log line "Restored N
messages for stream ... in T" gives each stream's restore time (the median is printed).
The server listens on loopback with a random token; its store is a temporary directory
removed at the end, or `--store DIR`, kept (filled once: a later run only restarts)."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import secrets
import signal
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import nats
from nats.js.api import StorageType, StoreCompression, StreamConfig, StreamSource

from eventstore import archive

SERVER = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "nats-server"
TYPES = ("Created", "StartRequested", "Scheduled", "Started", "Stopped", "Removed", "Deleted")
PER_AGGREGATE = 10  # events an aggregate; over len(TYPES) subjects
INTERLEAVED = 4  # aggregates whose events alternate
RESTORED = re.compile(r"Restored ([\d,]+) messages for stream '[^']*> ([A-Z]+)' in (\S+)")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(store: Path, log: Path, port: int, token: str) -> subprocess.Popen[bytes]:
    args = ["-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(store), "-l", str(log)]
    return subprocess.Popen(
        [str(SERVER), *args, "--auth", token],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def _connect(port: int, token: str) -> nats.NATS:
    deadline = time.monotonic() + 120
    while True:
        try:
            return await nats.connect(
                f"nats://127.0.0.1:{port}", token=token, allow_reconnect=False, error_cb=_quiet
            )
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def _quiet(e: Exception) -> None:
    """(the server is still starting: asked again)"""


def _subject(aggregate: int, n: int) -> str:
    """The aggregate's `n`th event's subject: one of its len(TYPES) type/node subjects."""
    t = n % len(TYPES)
    node = "_" if t % 2 == 0 else f"node-{aggregate % 8}"
    kind = ("vm", "vmi", "migration")[aggregate % 3]
    return f"virt.{kind}.ns-{aggregate % 50}.a{aggregate}.{kind.title()}{TYPES[t]}.{node}"


async def fill(port: int, token: str, events: int) -> None:
    nc = await _connect(port, token)
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="VIRT", subjects=["virt.>"], storage=StorageType.FILE))
    for name, transforms in (("FULL", None), ("COLLAPSED", [archive.TRANSFORM])):
        await js.add_stream(
            StreamConfig(
                name=name,
                mirror=StreamSource(name="VIRT", subject_transforms=transforms),
                storage=StorageType.FILE,
                compression=StoreCompression.S2,
            )
        )
    body = b"x" * 100
    started = time.monotonic()
    for i in range(events):
        group, k = divmod(i, INTERLEAVED * PER_AGGREGATE)
        aggregate = group * INTERLEAVED + k % INTERLEAVED
        await js.publish_async(_subject(aggregate, k // INTERLEAVED), body, stream="VIRT")
        if i % 4000 == 3999:
            await js.publish_async_completed()
    await js.publish_async_completed()
    print(f"{events} events published in {time.monotonic() - started:.0f} s", flush=True)
    for name in ("FULL", "COLLAPSED"):
        while (await js.stream_info(name)).state.last_seq < events:  # noqa: ASYNC110
            await asyncio.sleep(0.5)
        # (the count alone: a list of 700,000 subjects outlasts a request's timeout)
        reply = await nc.request(f"$JS.API.STREAM.INFO.{name}", b"", timeout=30)
        state = json.loads(reply.data)["state"]
        print(f"{name}: {state['messages']} messages on {state['num_subjects']} subjects")
    await nc.close()


def restores(log: Path, since: int) -> dict[str, float]:
    text = log.read_bytes()[since:].decode()
    return {m.group(2): _seconds(m.group(3)) for m in RESTORED.finditer(text)}


def _seconds(go: str) -> float:
    """A Go duration (`1.07s`, `212.3ms`, `950µs`) in seconds."""
    for unit, scale in (("ms", 1e-3), ("µs", 1e-6), ("us", 1e-6), ("ns", 1e-9), ("s", 1.0)):
        if go.endswith(unit):
            return float(go[: -len(unit)]) * scale
    raise ValueError(go)


async def main(events: int, restarts: int, keep: Path | None) -> None:
    with tempfile.TemporaryDirectory(prefix="archive-restore-") as tmp:
        store = (keep or Path(tmp)) / "store"
        log, port, token = Path(tmp) / "nats.log", _port(), secrets.token_hex(16)
        if not store.exists():
            server = _start(store, log, port, token)
            try:
                await fill(port, token, events)
            finally:
                server.send_signal(signal.SIGTERM)
                server.wait(120)
        log.touch()
        figures: dict[str, list[float]] = {}
        for _ in range(restarts):
            since = log.stat().st_size
            server = _start(store, log, port, token)
            try:
                nc = await _connect(port, token)
                await nc.close()
            finally:
                server.send_signal(signal.SIGTERM)
                server.wait(120)
            for name, seconds in restores(log, since).items():
                figures.setdefault(name, []).append(seconds)
        for name in ("VIRT", "FULL", "COLLAPSED"):
            got = figures.get(name, [])
            runs = ", ".join(f"{s:.3f}" for s in got)
            median = statistics.median(got) if got else float("nan")
            print(f"{name:>9}: restored in {median:.3f} s (median of {runs})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--store", type=Path, help="a store to fill once and keep")
    args = parser.parse_args()
    asyncio.run(main(args.events, args.restarts, args.store))
