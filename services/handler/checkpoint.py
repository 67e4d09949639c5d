"""A handler's checkpoint: what it folds from its node's events, as bytes (pure).

The VMI records, the migration jobs, the volume copies and the imports as the log made
them; never what the launcher fleet observed (a restarted handler learns that afresh by
re-attaching to its launchers). The shell keeps that log-only fold beside the live state for this.
`SCHEMA` changes with any of these shapes and with `FOLD_VERSION`."""

from __future__ import annotations

import msgspec

from projections.views_codec import shape
from services.handler.imports import ImportJob
from services.handler.migration import MigrationState
from services.handler.reactor import HandlerState
from services.handler.state import VMIRecord
from services.handler.volumes import CopyJob

FOLD_VERSION = 2  # 2: a migration's end, routed anywhere, ends its source job


class HandlerCheckpoint(msgspec.Struct, frozen=True):
    records: dict[str, VMIRecord]
    migrations: MigrationState
    copies: dict[str, CopyJob]
    imports: dict[str, ImportJob] = msgspec.field(default_factory=dict)


SCHEMA = f"virt-handler/{FOLD_VERSION}/{shape(HandlerCheckpoint)}"
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(HandlerCheckpoint)


class HandlerCodec:
    schema = SCHEMA

    def encode(self, state: HandlerState) -> bytes:
        return _encoder.encode(
            HandlerCheckpoint(
                records=dict(sorted(state.records.items())),
                migrations=state.migrations,
                copies=dict(sorted(state.copies.items())),
                imports=dict(sorted(state.imports.items())),
            )
        )

    def decode(self, data: bytes) -> HandlerState:
        c = _decoder.decode(data)
        return HandlerState(
            records=dict(c.records),
            migrations=c.migrations,
            copies=dict(c.copies),
            imports=dict(c.imports),
        )
