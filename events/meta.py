"""Metadata every event carries: who it is about, who emitted it, and why."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import msgspec


class Kind(StrEnum):
    """The aggregate kinds with events of their own (each its union in events/catalog.py,
    its view and its fold); the value is the subject token."""

    VM = "vm"
    VMI = "vmi"
    MIGRATION = "migration"
    NODE = "node"
    POLICY = "policy"


class ResourceKind(StrEnum):
    """Generic kinds (the Resource* events, one view shape, kinds/ tells them apart) that
    the code below kinds/ names: instance types, preferences, replica sets, pools,
    snapshots, restores, clones, exports, secrets, namespaces. Any other generic kind is the
    token its registry entry declares."""

    INSTANCETYPE = "instancetype"
    CLUSTER_INSTANCETYPE = "clusterinstancetype"
    PREFERENCE = "preference"
    CLUSTER_PREFERENCE = "clusterpreference"
    VMIRS = "vmirs"
    VMPOOL = "vmpool"
    SNAPSHOT = "vmsnapshot"
    SNAPSHOT_CONTENT = "vmsnapshotcontent"
    RESTORE = "vmrestore"
    NAMESPACE = "namespace"
    CLONE = "vmclone"
    EXPORT = "vmexport"
    SECRET = "secret"
    STORAGE_CLASS = "storageclass"
    PV = "pv"
    PVC = "pvc"
    DATA_VOLUME = "datavolume"
    DATA_SOURCE = "datasource"
    DATA_IMPORT_CRON = "dataimportcron"


# An aggregate kind as its subject token: a Kind, or a generic kind's (a ResourceKind, or
# one only the kind registry declares).
KindToken = str
_OWN = {k.value: k for k in Kind}


def own_kind(kind: KindToken) -> Kind | None:
    """The kind with events of its own, or None for a generic kind."""
    return _OWN.get(kind)


CLUSTER_SCOPE = "_"  # namespace token for cluster-scoped aggregates (nodes, policies)
# The kinds of their own without a namespace; a generic kind's cluster-scoped objects carry
# CLUSTER_SCOPE as their namespace (see Aggregate.cluster_scoped).
CLUSTER_SCOPED = frozenset({Kind.NODE, Kind.POLICY})


class Aggregate(msgspec.Struct, frozen=True, rename="camel"):
    """The object an event belongs to; one optimistic-concurrency stream per aggregate."""

    kind: Annotated[
        KindToken,
        msgspec.Meta(
            description="Its kind's subject token: a kind with events of its own or a generic "
            "kind's (any kind the api's registry serves)",
            examples=[*Kind, *ResourceKind],
        ),
    ]
    namespace: str
    name: str
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"

    @property
    def cluster_scoped(self) -> bool:
        """Without a namespace: its subject carries CLUSTER_SCOPE, its view key is its name."""
        return self.kind in CLUSTER_SCOPED or self.namespace in ("", CLUSTER_SCOPE)


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
    seconds, set by the shell (deciders get the clock passed in). `causation_seq` is the
    stream sequence of the event `causation_id` names (0: none, or not known when written):
    `why` reads that cause with one get, without an index of ids.
    """

    event_id: str
    aggregate: Aggregate
    occurred_at: float
    correlation_id: str
    actor: Actor
    causation_id: str = ""
    node: str = ""
    causation_seq: int = 0
