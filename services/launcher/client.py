"""The handler's side of the launcher socket: connect, send commands, receive statuses."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Generic, TypeVar, cast

import msgspec

from services.launcher.protocol import (
    Command,
    CommandResult,
    DomainStatus,
    Hello,
    MigrationProgress,
    MigrationResult,
    decode_report,
    encode,
)


class LauncherGone(ConnectionError):
    """The launcher closed the connection (it exited, or is exiting)."""


def _same(client: LauncherClient) -> LauncherClient:
    return client


_NO_HELLO = Hello(vmi_uid="", domain_name="", pid=0)  # until connect() has read it
_MAX_LINE = 1 << 20  # a report is a few hundred bytes; a longer line is a broken peer


T = TypeVar("T")


class _Mailbox(Generic[T]):
    """Reports in arrival order until the connection closes. An asyncio.Queue holds four
    deques (~3 KiB) and a handler keeps a connection (two queues) per VMI on its node;
    this holds a list only while reports wait, and a future only while someone waits."""

    __slots__ = ("_closed", "_items", "_waiters")

    def __init__(self) -> None:
        self._items: list[T] | None = None
        self._waiters: list[asyncio.Future[None]] | None = None
        self._closed = False

    def put(self, item: T) -> None:
        if self._items is None:
            self._items = []
        self._items.append(item)
        self._wake()

    def close(self) -> None:
        self._closed = True
        self._wake()

    @property
    def closed(self) -> bool:
        return self._closed

    def drain(self) -> list[T]:
        items, self._items = self._items, None
        return items or []

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, None
        for w in waiters or ():
            if not w.done():
                w.set_result(None)

    async def get(self) -> T:
        """The next report; LauncherGone once closed and drained (for every later caller
        too). Cancelling a waiting get loses nothing."""
        while not self._items:
            if self._closed:
                raise LauncherGone("launcher connection closed")
            waiter = asyncio.get_running_loop().create_future()
            if self._waiters is None:
                self._waiters = []
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if self._waiters is not None and waiter in self._waiters:
                    self._waiters.remove(waiter)
        item = self._items.pop(0)
        if not self._items:
            self._items = None
        return item


class LauncherClient(asyncio.Protocol):
    """One connection to one launcher.

    Results of commands are matched to their command by id; DomainStatus reports are
    queued in arrival order for `next_status` / `statuses`; MigrationProgress and
    MigrationResult reports are queued apart, for `next_migration_report`.

    A plain protocol on the loop's transport, not a StreamReader/StreamWriter pair and a
    reader task: a handler keeps one connection per VMI on its node, and the streams and
    the task were most of a connection's memory (~5.7 → ~2.5 KiB, tracemalloc).
    """

    __slots__ = (
        "_buf",
        "_closed",
        "_drained",
        "_hello",
        "_ids",
        "_migration",
        "_on_close",
        "_on_status",
        "_pending",
        "_statuses",
        "_transport",
        "hello",
        "latest_status",
    )

    def __init__(self) -> None:
        self.hello: Hello = _NO_HELLO
        self.latest_status: DomainStatus | None = None
        self._transport: asyncio.Transport | None = None
        self._buf = b""  # a partial line
        self._hello: asyncio.Future[Hello] | None = None  # only until the Hello arrives
        self._closed: asyncio.Future[None] | None = None  # only while close() waits
        self._drained: asyncio.Future[None] | None = None  # only while writing is paused
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[CommandResult]] = {}
        self._statuses: _Mailbox[DomainStatus] = _Mailbox()
        self._migration: _Mailbox[MigrationProgress | MigrationResult] = _Mailbox()
        self._on_status: Callable[[DomainStatus], None] | None = None
        self._on_close: Callable[[], None] | None = None

    @classmethod
    async def connect(cls, socket_path: str, timeout: float = 5.0) -> LauncherClient:
        """Connect, retrying while the launcher is still coming up, and read its Hello."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        # A freshly forked launcher listens within ~3 ms: poll fast at first, then back off.
        fast_until = loop.time() + 0.1
        while True:
            client = cls()
            client._hello = hello = loop.create_future()
            try:
                await loop.create_unix_connection(functools.partial(_same, client), socket_path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if loop.time() >= deadline:
                    raise
                await asyncio.sleep(0.001 if loop.time() < fast_until else 0.05)
        try:
            async with asyncio.timeout(max(0.1, deadline - loop.time())):
                await hello
        except BaseException:
            client._hello = None
            if client._transport is not None:
                client._transport.close()
            raise
        return client

    async def call(self, command: Command, timeout: float = 10.0) -> CommandResult:
        """Send a command (its id is assigned here) and wait for its result."""
        command.id = next(self._ids)
        future: asyncio.Future[CommandResult] = asyncio.get_running_loop().create_future()
        self._pending[command.id] = future
        try:
            if self._transport is None or self._transport.is_closing():
                raise LauncherGone("launcher connection closed")
            self._transport.write(encode(command))
            if self._drained is not None:
                await asyncio.shield(self._drained)
            async with asyncio.timeout(timeout):
                return await future
        finally:
            self._pending.pop(command.id, None)

    async def next_status(self, timeout: float | None = None) -> DomainStatus:
        async with asyncio.timeout(timeout):
            return await self._statuses.get()

    async def wait_for(
        self, predicate: Callable[[DomainStatus], bool], timeout: float = 10.0
    ) -> DomainStatus:
        """The first status (queued or future) that satisfies predicate."""
        async with asyncio.timeout(timeout):
            while True:
                status = await self.next_status()
                if predicate(status):
                    return status

    async def next_migration_report(
        self, timeout: float | None = None
    ) -> MigrationProgress | MigrationResult:
        async with asyncio.timeout(timeout):
            return await self._migration.get()

    async def migration_result(
        self, on_progress: Callable[[MigrationProgress], None] | None = None, timeout: float = 60
    ) -> MigrationResult:
        """Wait for the MigrationResult, passing each progress report to on_progress."""
        async with asyncio.timeout(timeout):
            while True:
                report = await self.next_migration_report()
                if isinstance(report, MigrationResult):
                    return report
                if on_progress is not None:
                    on_progress(report)

    async def statuses(self) -> AsyncIterator[DomainStatus]:
        with contextlib.suppress(LauncherGone):
            while True:
                yield await self.next_status()

    def subscribe(
        self, on_status: Callable[[DomainStatus], None], on_close: Callable[[], None]
    ) -> None:
        """Hand statuses to `on_status` as they arrive (those already queued first) instead
        of queueing them, and call `on_close` once when the connection ends: a consumer
        that follows every launcher (the handler) needs no task of its own per launcher."""
        self._on_status, self._on_close = on_status, on_close
        for status in self._statuses.drain():
            on_status(status)
        if self._statuses.closed:
            on_close()

    async def close(self) -> None:
        transport = self._transport
        if transport is None:
            return
        if self._closed is None:
            self._closed = asyncio.get_running_loop().create_future()
        transport.close()
        with contextlib.suppress(TimeoutError):  # connection_lost follows on the next turn
            async with asyncio.timeout(1.0):
                await asyncio.shield(self._closed)

    # -------------------------------------------------------- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport (uvloop's are not asyncio.Transport subclasses)
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        transport = self._transport
        assert transport is not None
        if self._buf:
            data = self._buf + data
        *lines, self._buf = data.split(b"\n")
        if len(self._buf) > _MAX_LINE:
            transport.close()
            return
        for line in lines:
            if transport.is_closing():  # a broken peer: ignore the rest
                return
            try:
                self._report(decode_report(line))
            except msgspec.DecodeError:
                transport.close()

    def eof_received(self) -> bool | None:
        if self._buf:
            line, self._buf = self._buf, b""
            with contextlib.suppress(msgspec.DecodeError):
                self._report(decode_report(line))
        return None  # close the transport

    def pause_writing(self) -> None:
        if self._drained is None:
            self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None  # close() has nothing left to wait for
        gone = LauncherGone("launcher connection closed")
        if self._hello is not None and not self._hello.done():
            self._hello.set_exception(gone)
        self.resume_writing()
        self._statuses.close()
        self._migration.close()
        if self._on_close is not None:
            self._on_close()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(gone)
        if self._closed is not None and not self._closed.done():
            self._closed.set_result(None)

    def _report(
        self, report: Hello | DomainStatus | CommandResult | MigrationProgress | MigrationResult
    ) -> None:
        hello, self._hello = self._hello, None
        if hello is not None:  # the first line must be the Hello (connect() waits for it)
            if isinstance(report, Hello):
                self.hello = report
                if not hello.done():
                    hello.set_result(report)
            else:
                if not hello.done():
                    hello.set_exception(
                        LauncherGone(f"expected Hello, got {type(report).__name__}")
                    )
                if self._transport is not None:
                    self._transport.close()
            return
        if isinstance(report, CommandResult):
            future = self._pending.get(report.id)
            if future is not None and not future.done():
                future.set_result(report)
        elif isinstance(report, DomainStatus):
            self.latest_status = report
            if self._on_status is not None:
                self._on_status(report)
            else:
                self._statuses.put(report)
        elif isinstance(report, MigrationProgress | MigrationResult):
            self._migration.put(report)
