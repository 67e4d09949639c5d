"""The handler's side of the launcher socket: connect, send commands, receive statuses."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable

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
        self._statuses: asyncio.Queue[DomainStatus | None] = asyncio.Queue()
        self._migration: asyncio.Queue[MigrationProgress | MigrationResult | None] = asyncio.Queue()
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
        status = await asyncio.wait_for(self._statuses.get(), timeout)
        if status is None:
            self._statuses.put_nowait(None)  # keep reporting the end to later callers
            raise LauncherGone("launcher connection closed")
        return status

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
        report = await asyncio.wait_for(self._migration.get(), timeout)
        if report is None:
            self._migration.put_nowait(None)
            raise LauncherGone("launcher connection closed")
        return report

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
                    self._statuses.put_nowait(report)
                elif isinstance(report, MigrationProgress | MigrationResult):
                    self._migration.put_nowait(report)
        except ConnectionError:
            pass
        finally:
            self._statuses.put_nowait(None)
            self._migration.put_nowait(None)
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(LauncherGone("launcher connection closed"))
