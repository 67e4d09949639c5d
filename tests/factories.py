"""Small builders for events in tests."""

from __future__ import annotations

import time
import uuid

from events.meta import Actor, Aggregate, Kind, Meta


def meta(
    kind: Kind = Kind.VM,
    name: str = "vm1",
    namespace: str = "default",
    *,
    node: str = "",
    event_id: str | None = None,
    correlation_id: str = "corr",
    causation_id: str = "",
    at: float | None = None,
) -> Meta:
    return Meta(
        event_id=event_id or uuid.uuid4().hex,
        aggregate=Aggregate(kind=kind, namespace=namespace, name=name),
        occurred_at=time.time() if at is None else at,
        correlation_id=correlation_id,
        causation_id=causation_id,
        actor=Actor(service="test"),
        node=node,
    )
