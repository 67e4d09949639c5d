"""The read side's bounded watch history, kept as zlib-compressed blocks of changes.

A watch resuming from resourceVersion N needs every change after N, in order, each with
the object as it was rendered then. Consecutive rendered objects are alike (the same
VMI a few events apart, or many VMIs of one template), so compressing a block of them
together takes a tenth of compressing each alone (bench-like fold: ~40 B against
~390 B per change, plus a ~120 B record per change that a block does not need). The
newest changes wait as encoded JSON in an open block until it is full."""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Iterator
from typing import Any

import msgspec

from events.meta import KindToken
from readside.watch import Change, EventType

BLOCK = 64  # changes per compressed block (larger blocks compress little better)


class _Line(msgspec.Struct, array_like=True):
    """A Change as one element of a block's JSON array."""

    seq: int
    type: EventType
    kind: KindToken
    key: str
    object: dict[str, Any]


_encode = msgspec.json.Encoder().encode
_decode_block = msgspec.json.Decoder(list[_Line]).decode


class _Block(msgspec.Struct, frozen=True):
    first_seq: int
    last_seq: int
    count: int
    raw: bytes  # zlib of the JSON array of the block's changes


class WatchHistory:
    """The last `limit` changes (at least `limit - block` after the first evictions, as
    whole blocks leave together). `floor` is the newest seq whose changes were dropped: a
    watch from rv ≥ floor gets every kept change with seq > rv; an older rv must 410."""

    def __init__(self, limit: int, *, block: int = BLOCK) -> None:
        if limit < 1:
            raise ValueError("the watch history must keep at least one change")
        self.limit = limit
        self.block = max(1, min(block, limit // 4))
        self.floor = 0
        self._blocks: deque[_Block] = deque()
        self._open: list[bytes] = []  # encoded _Line arrays, oldest first
        self._open_first = 0
        self._open_last = 0
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def append(self, c: Change) -> None:
        if not self._open:
            self._open_first = c.seq
        self._open_last = c.seq
        self._open.append(_encode((c.seq, c.type, c.kind, c.key, c.object)))
        self._count += 1
        if len(self._open) >= self.block:
            raw = zlib.compress(b"[" + b",".join(self._open) + b"]", 1)
            self._blocks.append(_Block(self._open_first, self._open_last, len(self._open), raw))
            self._open = []
        while self._count > self.limit and self._blocks:
            dropped = self._blocks.popleft()
            self._count -= dropped.count
            self.floor = dropped.last_seq

    def after(self, seq: int) -> Iterator[Change]:
        """Every kept change with a seq greater than `seq`, oldest first."""
        for b in self._blocks:
            if b.last_seq > seq:
                yield from _changes(zlib.decompress(b.raw), seq)
        if self._open and self._open_last > seq:
            yield from _changes(b"[" + b",".join(self._open) + b"]", seq)


def _changes(array: bytes, seq: int) -> Iterator[Change]:
    for line in _decode_block(array):
        if line.seq > seq:
            yield Change(line.seq, line.type, line.kind, line.key, line.object)
