"""The port's `Trimming` over JetStream: the archive's tools (`eventstore/archive.py`) on the
store's own connection, the client's errors translated to the port's at this edge."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from nats.js.client import JetStreamContext

from eventstore import archive
from eventstore.floor import Floor, PendingEnd
from eventstore.nats_errors import translated
from eventstore.settings import StreamSettings


class _Store(Protocol):
    js: JetStreamContext
    settings: StreamSettings

    @property
    def stream(self) -> str: ...


class JsTrimming:
    def __init__(self, store: _Store) -> None:
        self.js = store.js
        self.stream = store.stream
        self.settings = store.settings

    async def trimmable(self) -> bool:
        with translated():
            return await archive.trimmable(self.js, self.stream)

    async def floor(self) -> Floor:
        with translated():
            return await archive.read_floor_record(self.js, self.stream)

    async def record_floor(self, floor: int, pending: Sequence[PendingEnd]) -> None:
        with translated():
            await archive.write_floor(self.js, self.stream, floor, self.settings, pending=pending)

    async def archived_upto(self) -> int:
        with translated():
            return await archive.archived_upto(self.js, self.stream)

    async def acked_floor(self) -> int:
        with translated():
            return await archive.acked_floor(self.js, self.stream)

    async def last_of(self, scope: str, at_least: int) -> int:
        with translated():
            return await archive.last_of(self.js, self.stream, scope, at_least)

    async def retire(self, scope: str, end: int) -> None:
        with translated():
            await archive.retire(self.js, self.stream, scope, end)
