"""The views of a `Cluster` as bytes, for checkpoints: msgpack, deterministic (tables
sorted by key), so "checkpoint + tail equals a full rebuild" is a bytes comparison.

`SCHEMA` names what a checkpoint of the views was written with: the fold's version (raise
`FOLD_VERSION` when a fold makes something else of the same events) and the views' shape
(any change of a view's fields changes it), so a checkpoint from other code is refused,
never misread. Pure."""

from __future__ import annotations

import hashlib

import msgspec

from events.meta import KindToken
from projections.cluster import Cluster
from projections.kube_events import KubeEvents, KubeEventView
from projections.views import (
    MigrationView,
    NodeView,
    PolicyView,
    ResourceView,
    VMIView,
    VMView,
)


class Views(msgspec.Struct, frozen=True):
    last_seq: int
    vms: dict[str, VMView]
    vmis: dict[str, VMIView]
    migrations: dict[str, MigrationView]
    nodes: dict[str, NodeView]
    policies: dict[str, PolicyView]
    resources: dict[KindToken, dict[str, ResourceView]] = {}
    # the api's Event records (projections/kube_events.py); None: a fold without them
    kube_events: dict[str, KubeEventView] | None = None


_views_encoder = msgspec.msgpack.Encoder()
_views_decoder = msgspec.msgpack.Decoder(Views)

FOLD_VERSION = 1


def shape(*types: object) -> str:
    """A digest of the types' JSON schema: changes whenever a field does."""
    schema = msgspec.json.encode(msgspec.json.schema_components(types)[1])
    return hashlib.sha256(schema).hexdigest()[:12]


SCHEMA = f"views/{FOLD_VERSION}/{shape(Views)}"


def views_of(cluster: Cluster) -> Views:
    """The cluster's views, tables sorted by key."""
    return Views(
        last_seq=cluster.last_seq,
        vms=dict(sorted(cluster.vms.items())),
        vmis=dict(sorted(cluster.vmis.items())),
        migrations=dict(sorted(cluster.migrations.items())),
        nodes=dict(sorted(cluster.nodes.items())),
        policies=dict(sorted(cluster.policies.items())),
        resources={k: dict(sorted(t.items())) for k, t in cluster.resources.items()},
        kube_events=(
            dict(sorted(cluster.kube_events.table.items()))
            if cluster.kube_events is not None
            else None
        ),
    )


def cluster_of(v: Views) -> Cluster:
    """A cluster holding the views, with its derived index."""
    c = Cluster()
    c.last_seq = v.last_seq
    # filled in place: the cluster's kind → table lookup holds these dicts
    c.vms.update(v.vms)
    c.vmis.update(v.vmis)
    c.migrations.update(v.migrations)
    c.nodes.update(v.nodes)
    c.policies.update(v.policies)
    c.resources.update({k: dict(t) for k, t in v.resources.items()})
    if v.kube_events is not None:
        c.kube_events = KubeEvents.of(v.kube_events)
    for k, vmi in c.vmis.items():  # the index is derived, not stored
        if vmi.node:
            c.vmis_by_node.setdefault(vmi.node, set()).add(k)
    return c


def encode_views(cluster: Cluster) -> bytes:
    """The cluster's views, deterministic for equal views (tables sorted by key): two
    encodings are equal exactly when the views are."""
    return _views_encoder.encode(views_of(cluster))


def decode_views(data: bytes) -> Cluster:
    return cluster_of(_views_decoder.decode(data))
