"""A service's checkpoints (`eventstore/checkpoints.py`) as the shell takes and loads them.

A shell checkpoint is the reactor's state as its codec encodes it, the per-aggregate
versions the shell folds by, and `upto`: every event of the reactor's filters up to that
sequence is in the state (events of some aggregates past it may be too: their versions
say so, and the tail skips them as a running shell does). The shell takes one only while
none of its own appends is folded ahead of the stream (`ahead` empty), so a checkpoint is
always a fold in stream order: the `Unordered` repair (a restart) loads it and folds the
tail in order, instead of folding everything from sequence 1.

Cadence (`eventstore/cadence.py`, the api's projection keeps the same): every `every`
events or `seconds` of time, whichever comes first, and at a clean stop. The state is
encoded at once (one point of the fold, no await in between); the write runs in the
background, one at a time."""

from __future__ import annotations

from typing import Generic, Protocol

import msgspec
import structlog
from typing_extensions import TypeVar

from eventstore import cadence, checkpoints
from eventstore.port import Bucket, EventLog

S = TypeVar("S")
log = structlog.get_logger()
SHELL_VERSION = 1


class StateCodec(Protocol[S]):
    """A reactor's state as bytes and back (pure); `schema` names the encoding and the fold
    it was made with."""

    @property
    def schema(self) -> str: ...

    def encode(self, state: S) -> bytes: ...

    def decode(self, data: bytes) -> S: ...


class ShellCheckpoint(msgspec.Struct, frozen=True):
    upto: int
    versions: dict[str, int]
    state: bytes


class Loaded(msgspec.Struct, Generic[S], frozen=True):
    upto: int
    versions: dict[str, int]
    state: S
    again: S | None  # a second decoding: the log-only fold kept apart (`apart`)


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(ShellCheckpoint)


class Checkpointer(Generic[S]):
    def __init__(
        self,
        store: EventLog,
        name: str,
        codec: StateCodec[S],
        *,
        apart: bool = False,
        every: int = cadence.EVERY,
        seconds: float = cadence.SECONDS,
        bucket: str = checkpoints.BUCKET,
    ) -> None:
        self.store = store
        self.bucket = bucket
        self.name = name
        self.codec = codec
        # the state also holds observations: the checkpoint is of the log's fold kept
        # apart from it (`Folding.log_only`)
        self.apart = apart
        self.cadence = cadence.Cadence(name, every=every, seconds=seconds)
        self.schema = f"shell/{SHELL_VERSION}/{codec.schema}"
        self.saves = 0

    @property
    def saved_upto(self) -> int:
        return self.cadence.saved_upto

    async def _bucket(self) -> Bucket:
        return await checkpoints.bucket(self.store, self.bucket)

    async def load(self) -> Loaded[S] | None:
        """The newest usable checkpoint; a refused one is said in one line (None)."""
        kv = await self._bucket()
        found = await checkpoints.load(
            kv,
            self.name,
            schema=self.schema,
            stream=self.store.stream,
            stream_last_seq=await self.store.stream_last_seq(),
        )
        if isinstance(found, checkpoints.Unusable):
            cadence.refused(self.name, found.reason)
            return None
        if found is None:
            return None
        try:
            cp = _decoder.decode(found.body)
            loaded = Loaded(
                upto=cp.upto,
                versions=dict(cp.versions),
                state=self.codec.decode(cp.state),
                again=self.codec.decode(cp.state) if self.apart else None,
            )
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            cadence.refused(self.name, f"it does not decode ({e})")
            return None
        self.cadence.loaded(cp.upto)
        return loaded

    def due(self, upto: int) -> bool:
        return self.cadence.due(upto)

    def take(self, upto: int, versions: dict[str, int], state: S) -> None:
        """Encode now, write in the background."""
        body = _encoder.encode(
            ShellCheckpoint(upto=upto, versions=versions, state=self.codec.encode(state))
        )
        self.cadence.taken(upto, self._save(upto, body))

    async def _save(self, upto: int, body: bytes) -> None:
        try:
            kv = await self._bucket()
            await checkpoints.save(
                kv,
                self.name,
                schema=self.schema,
                stream=self.store.stream,
                last_seq=upto,
                body=body,
            )
            self.saves += 1
        except Exception as e:  # the next one is due soon; the previous stays usable
            log.warning("checkpoint not saved", checkpoint=self.name, error=repr(e))

    async def settle(self) -> None:
        """Wait for a write in flight."""
        await self.cadence.settle()
