"""A what-if over the log (`services/controller/whatif.py`'s sandbox): the log is read in
this process and decided on in a forked child, so reading and deciding each have a core
and a what-if lasts about the longer of the two, not their sum.

The child is a fork: it holds the decider and the change as they were built (a decider
from another module, a policy's prelude) and touches no connection and no event loop.
Only bytes cross: batches of records (sequence, subject, time, data, the sequence a
redelivery retries) as msgpack, length-prefixed, on one pipe; the report, or the error
that stopped the decider, on another. A read that fails ends the records without their
end mark: the child goes without a report. The writes block: while the pipe is full the
child is the slower side, and the server holds what this process has not read yet (no
thread beside a fork)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
from typing import BinaryIO, NoReturn

import msgspec

from eventstore import records
from eventstore.port import EventLog, Record, Undecodable
from services.controller.whatif import Report, WhatIf

BATCH = 128  # records a frame
PIPE_BYTES = 1 << 20  # the records' pipe: room for a few frames while the child decides
_LENGTH = 4
_Frame = list[tuple[int, str, float, bytes, int]]
_frames = msgspec.msgpack.Decoder(_Frame)
_encode = msgspec.msgpack.Encoder().encode


class DeciderFailed(Exception):
    """The sandbox's decider raised: its error, as the child reported it."""


async def replay(store: EventLog, sandbox: WhatIf) -> Report:
    """Every event of `store` (the archive included) fed to `sandbox`; its report."""
    rin, rout = os.pipe()  # records: here → child
    ain, aout = os.pipe()  # the answer: child → here
    with contextlib.suppress(OSError):  # a smaller pipe only costs more switches
        fcntl.fcntl(rout, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    pid = os.fork()
    if pid == 0:
        os.close(rout)
        os.close(ain)
        _decide(rin, aout, sandbox)
    os.close(rin)
    os.close(aout)
    done = False
    try:
        try:
            batch: _Frame = []
            async for r in store.records(as_archived=True):
                batch.append((r.seq, r.subject, r.time, r.data, r.redelivery_of))
                if len(batch) >= BATCH:
                    _send(rout, batch)
                    batch = []
            _send(rout, batch, True)
        except BrokenPipeError:
            pass  # the child stopped before the end: its answer says why
        os.close(rout)
        rout = -1
        answer = _read_all(ain)
        done = True
    finally:
        if rout >= 0:
            os.close(rout)
        os.close(ain)
        if not done:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)  # noqa: ASYNC222  (it has answered or been killed: at once)
    if answer[:1] != b"\x00":
        raise DeciderFailed(answer[1:].decode(errors="replace") or "the decider's process died")
    return msgspec.msgpack.decode(answer[1:], type=Report)


def _send(fd: int, batch: _Frame, last: bool = False) -> None:
    data = _encode(batch) if batch else b""
    frames = len(data).to_bytes(_LENGTH, "big") + data if batch else b""
    if last:
        frames += bytes(_LENGTH)  # the end mark: an empty frame
    view = memoryview(frames)
    while view:
        view = view[os.write(fd, view) :]


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _decide(rin: int, aout: int, sandbox: WhatIf) -> NoReturn:
    """The child: decode and feed each record until the end mark, answer, exit."""
    code = 1
    answer = b""
    try:
        with os.fdopen(rin, "rb", buffering=PIPE_BYTES) as src:
            while n := int.from_bytes(_exactly(src, _LENGTH), "big"):
                for seq, subject, at, data, again in _frames.decode(_exactly(src, n)):
                    try:
                        stored = records.stored(Record(seq, subject, data, 0, at, again))
                    except Undecodable:
                        sandbox.skip(seq, subject)
                        continue
                    sandbox.feed(stored)
        answer = b"\x00" + msgspec.msgpack.encode(sandbox.report())
        code = 0
    except EOFError:
        pass  # the reader stopped: nobody waits for an answer
    except BaseException as e:  # the decider's failure, for the reader to raise
        answer = b"\x01" + f"{type(e).__name__}: {e}".encode()
    try:
        view = memoryview(answer)
        while view:
            view = view[os.write(aout, view) :]
    finally:
        os._exit(code)


def _exactly(src: BinaryIO, n: int) -> bytes:
    data = src.read(n)
    if len(data) < n:
        raise EOFError
    return data
