"""Metadata every event carries: who it is about, who emitted it, and why."""

from __future__ import annotations

from enum import StrEnum

import msgspec


class Kind(StrEnum):
    """Aggregate kinds; the value is the subject token."""

    VM = "vm"
    VMI = "vmi"
    MIGRATION = "migration"
    NODE = "node"
    POLICY = "policy"
    # objects whose events are the generic Resource* ones (one view shape, kinds/ tells
    # them apart): instance types, preferences, replica sets, pools, snapshots, restores
    INSTANCETYPE = "instancetype"
    CLUSTER_INSTANCETYPE = "clusterinstancetype"
    PREFERENCE = "preference"
    CLUSTER_PREFERENCE = "clusterpreference"
    VMIRS = "vmirs"
    VMPOOL = "vmpool"
    SNAPSHOT = "vmsnapshot"
    SNAPSHOT_CONTENT = "vmsnapshotcontent"
    RESTORE = "vmrestore"


CLUSTER_SCOPE = "_"  # namespace token for cluster-scoped aggregates (nodes, policies)
# Aggregates without a namespace: their subject carries CLUSTER_SCOPE, their key is the name.
CLUSTER_SCOPED = frozenset(
    {Kind.NODE, Kind.POLICY, Kind.CLUSTER_INSTANCETYPE, Kind.CLUSTER_PREFERENCE}
)
# Aggregates folded by the generic resource fold (`evolve_resource`).
RESOURCE_KINDS = (
    Kind.INSTANCETYPE,
    Kind.CLUSTER_INSTANCETYPE,
    Kind.PREFERENCE,
    Kind.CLUSTER_PREFERENCE,
    Kind.VMIRS,
    Kind.VMPOOL,
    Kind.SNAPSHOT,
    Kind.SNAPSHOT_CONTENT,
    Kind.RESTORE,
)


class Aggregate(msgspec.Struct, frozen=True, rename="camel"):
    """The object an event belongs to; one optimistic-concurrency stream per aggregate."""

    kind: Kind
    namespace: str
    name: str
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


class Actor(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True):
    """Who emitted the event: a service (on a node), and for a user's request the
    authenticated user the api served (`user`), so replay and `why` say who asked."""

    service: str
    node: str = ""
    user: str = ""


class Meta(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True):
    """Event metadata.

    `node` routes the event to one node's handler (it becomes the subject's last token),
    so a handler's consumer filters server-side to its own VMIs. `occurred_at` is epoch
    seconds, set by the shell (deciders get the clock passed in).
    """

    event_id: str
    aggregate: Aggregate
    occurred_at: float
    correlation_id: str
    actor: Actor
    causation_id: str = ""
    node: str = ""
