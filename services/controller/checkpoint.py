"""The controller's checkpoint: what it folds from the log, as bytes (pure).

The cluster's views and the bookkeeping folded beside them; not the heartbeats (they come
from the KV bucket, not the log) nor the placement and dependents indexes (derived from the
views on load). `SCHEMA` changes with any of these shapes and with `FOLD_VERSION`."""

from __future__ import annotations

import msgspec

from projections.views_codec import Views, cluster_of, shape, views_of
from services.controller.state import ControllerState

FOLD_VERSION = 1


class ControllerCheckpoint(msgspec.Struct, frozen=True):
    views: Views
    phase_at_delete: dict[str, str]
    last_outcome: dict[str, str]
    abort_routed: dict[str, str]
    eviction_blocked: list[tuple[str, str]]


SCHEMA = f"virt-controller/{FOLD_VERSION}/{shape(ControllerCheckpoint)}"
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(ControllerCheckpoint)


class ControllerCodec:
    schema = SCHEMA

    def encode(self, state: ControllerState) -> bytes:
        return _encoder.encode(
            ControllerCheckpoint(
                views=views_of(state.cluster),
                phase_at_delete=dict(sorted(state.phase_at_delete.items())),
                last_outcome=dict(sorted(state.last_outcome.items())),
                abort_routed=dict(sorted(state.abort_routed.items())),
                eviction_blocked=sorted(state.eviction_blocked),
            )
        )

    def decode(self, data: bytes) -> ControllerState:
        c = _decoder.decode(data)
        state = ControllerState(
            cluster=cluster_of(c.views),
            phase_at_delete=dict(c.phase_at_delete),
            last_outcome=dict(c.last_outcome),
            abort_routed=dict(c.abort_routed),
            eviction_blocked={(a, b) for a, b in c.eviction_blocked},
        )
        state.index.rebuild(state.cluster)
        state.dependents.rebuild(state.cluster)
        state.claims.rebuild(state.cluster)
        state.ownership.rebuild(state.cluster)
        return state
