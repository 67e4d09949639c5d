"""What a command decides with and what it decides: the request's context (the clock, the
correlation id, id sources and the user, handed in by the transport's shell) and the
`Outcome` (the events to append and the object that answers). Pure."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from core import names
from events.catalog import Event
from events.meta import CLUSTER_SCOPE, Actor, Aggregate, KindToken, Meta

SERVICE = "virt-api"


@dataclass(frozen=True)
class RequestContext:
    """What the shell passes in: the clock, the request's correlation id, id sources."""

    now: float
    correlation_id: str
    new_id: Callable[[], str]  # 32 hex chars (event ids; uids are formatted from it)
    suffix: Callable[[], str]  # 5 random lowercase alphanumerics (generateName)
    socket_name_max: int = names.SOCKET_NAME_MAX  # a launcher's `<ns>_<name>`, in bytes
    user: str = ""  # the authenticated user who asked (the events' actor)

    def meta(
        self, kind: KindToken, namespace: str, name: str, uid: str = "", node: str = ""
    ) -> Meta:
        return Meta(
            event_id=self.new_id(),
            aggregate=Aggregate(
                kind=kind, namespace=namespace or CLUSTER_SCOPE, name=name, uid=uid
            ),
            occurred_at=self.now,
            correlation_id=self.correlation_id,
            actor=Actor(service=SERVICE, user=self.user),
            node=node,
        )

    def uid(self) -> str:
        return str(uuid.UUID(hex=self.new_id()))


class Append(msgspec.Struct, frozen=True):
    event: Event
    expected: int | None  # None: no check (the follow-ups of one intent after its first append)


class Outcome(msgspec.Struct, frozen=True):
    """Events to append, which object answers the request, with what code, and the
    warnings the answer carries (fields outside the schema, `Warning: 299`)."""

    appends: tuple[Append, ...]
    kind: KindToken
    key: str
    code: int = 200
    warnings: tuple[str, ...] = ()
