"""The handler's side of the launcher socket: connect, send commands, receive statuses."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Generic, TypeVar

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


class LauncherClient:
    """One connection to one launcher.

    Results of commands are matched to their command by id; DomainStatus reports are
    queued in arrival order for `next_status` / `statuses`; MigrationProgress and
    MigrationResult reports are queued apart, for `next_migration_report`.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hello: Hello):
        self.hello = hello
        self.latest_status: DomainStatus | None = None
        self._reader = reader
        self._writer = writer
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[CommandResult]] = {}
        self._statuses: _Mailbox[DomainStatus] = _Mailbox()
        self._migration: _Mailbox[MigrationProgress | MigrationResult] = _Mailbox()
        self._on_status: Callable[[DomainStatus], None] | None = None
        self._on_close: Callable[[], None] | None = None
        self._reader_task = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def connect(cls, socket_path: str, timeout: float = 5.0) -> LauncherClient:
        """Connect, retrying while the launcher is still coming up, and read its Hello."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        # A freshly forked launcher listens within ~3 ms: poll fast at first, then back off.
        fast_until = loop.time() + 0.1
        while True:
            try:
                reader, writer = await asyncio.open_unix_connection(socket_path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if loop.time() >= deadline:
                    raise
                await asyncio.sleep(0.001 if loop.time() < fast_until else 0.05)
        line = await asyncio.wait_for(reader.readline(), max(0.1, deadline - loop.time()))
        hello = decode_report(line) if line else None
        if not isinstance(hello, Hello):
            writer.close()
            raise LauncherGone(f"expected Hello from {socket_path}, got {line!r}")
        return cls(reader, writer, hello)

    async def call(self, command: Command, timeout: float = 10.0) -> CommandResult:
        """Send a command (its id is assigned here) and wait for its result."""
        command.id = next(self._ids)
        future: asyncio.Future[CommandResult] = asyncio.get_running_loop().create_future()
        self._pending[command.id] = future
        try:
            self._writer.write(encode(command))
            await self._writer.drain()
            return await asyncio.wait_for(future, timeout)
        finally:
            self._pending.pop(command.id, None)

    async def next_status(self, timeout: float | None = None) -> DomainStatus:
        return await asyncio.wait_for(self._statuses.get(), timeout)

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
        return await asyncio.wait_for(self._migration.get(), timeout)

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
        self._reader_task.cancel()
        self._writer.close()
        with contextlib.suppress(ConnectionError):
            await self._writer.wait_closed()

    async def _read(self) -> None:
        try:
            while line := await self._reader.readline():
                report = decode_report(line)
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
        except ConnectionError:
            pass
        finally:
            self._statuses.close()
            self._migration.close()
            if self._on_close is not None:
                self._on_close()
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(LauncherGone("launcher connection closed"))
