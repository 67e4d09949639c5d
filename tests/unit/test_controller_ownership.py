"""The controller's ownership index (services/controller/ownership.py) against a scan of
the views: over generated clusters of VMs, replica sets and pools, deleted in the
background, in the foreground or as orphans, with finalizers of their own, after every
event the index names the same existing uids, orphans, marked objects and surplus
migrations a walk over every object finds, and rebuilt from the views (a checkpoint's
load) it is the index folded event by event."""

from __future__ import annotations

import contextlib
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import ApiError
from events.catalog import Event, MetadataChanged, ResourceCreated, VMCreated
from events.envelope import Stored
from events.meta import Kind, KindToken, ResourceKind
from projections.cluster import Cluster
from projections.views import MigrationView
from services.controller.ownership import FINALIZED_MIGRATIONS_KEPT, Ownership
from tests.factories import vm_manifest
from tests.unit.test_controller_dependents import handlers
from tests.unit.test_controller_world import World
from tests.unit.test_garbage_collector import _delete
from tests.unit.test_replicas import pool_manifest, rs_manifest


def _views(c: Cluster) -> list[tuple[KindToken, str, Any]]:
    return [
        (kind, k, v)
        for kind, table in c.object_tables()
        for k, v in table.items()
        if not (isinstance(v, MigrationView) and v.gone)
    ]


def scan(c: Cluster) -> dict[str, Any]:
    """What the garbage collector would find by walking every view."""
    views = _views(c)
    live = {v.uid for _, _, v in views if v.uid}
    by_vmi: dict[tuple[str, str], list[MigrationView]] = {}
    for mig in c.migrations.values():
        if mig.final and not mig.deleted:
            by_vmi.setdefault((mig.namespace, mig.vmi_name), []).append(mig)
    surplus = []
    for vmi in sorted(by_vmi):
        migs = sorted(by_vmi[vmi], key=lambda m: (m.created_at, m.name))
        surplus += [m.name for m in migs[:-FINALIZED_MIGRATIONS_KEPT]]
    owned = [(kind, k, v) for kind, k, v in views if kind != Kind.POLICY and v.owners]
    return {
        "live": live,
        "orphans": {(kind, k) for kind, k, v in owned if not any(u in live for u in v.owners)},
        "marked": {(kind, k) for kind, k, v in views if v.marked},
        "dependents": {
            u: sorted((kind, k) for kind, k, v in owned if u in v.owners)
            for u in {u for _, _, v in owned for u in v.owners}
        },
        "surplus": surplus,
    }


def answers(own: Ownership, c: Cluster, uids: set[str]) -> dict[str, Any]:
    return {
        "live": {u for u in uids if own.live(u)},
        "orphans": set(own.orphans),
        "marked": set(own.marked),
        "dependents": {u: own.dependents(u) for u in uids if own.dependents(u)},
        "surplus": [m.name for m in own.finalized_surplus(c)],
    }


class Checked(World):
    """A world whose every fold checks the index against the scan."""

    def fold(self, ev: Event) -> Stored:
        s = super().fold(ev)
        c = self.state.cluster
        expected = scan(c)
        uids = expected["live"] | set(expected["dependents"]) | self.uids
        self.uids |= {v.uid for _, _, v in _views(c) if v.uid}
        assert answers(self.state.ownership, c, uids) == expected, ev
        return s

    uids: set[str] = set()  # every uid seen, gone ones too


steps = st.one_of(
    st.tuples(st.just("handlers")),
    st.tuples(st.just("vm"), st.sampled_from(["vm1", "vm2"])),
    st.tuples(st.just("rs"), st.integers(0, 2)),
    st.tuples(st.just("pool"), st.integers(0, 2)),
    st.tuples(st.just("finalizer"), st.sampled_from(["web", "pool"])),
    st.tuples(
        st.just("delete"),
        st.sampled_from([("vmirs", "web"), ("vmpool", "pool"), ("vm", "pool-0"), ("vm", "vm1")]),
        st.sampled_from(["Background", "Foreground", "Orphan"]),
    ),
    st.tuples(st.just("unfinalize"), st.sampled_from(["web", "pool"])),
)

KINDS = {"web": ResourceKind.VMIRS, "pool": ResourceKind.VMPOOL}


def step(w: World, s: tuple[Any, ...]) -> None:
    c = w.state.cluster
    match s:
        case ("handlers",):
            handlers(w, len(w.log))
        case ("vm", name) if f"default/{name}" not in c.vms:
            w.run(VMCreated(meta=w.m(Kind.VM, name), manifest=vm_manifest(name, "Always")))
        case ("rs", n) if "default/web" not in c.resources[ResourceKind.VMIRS]:
            w.run(ResourceCreated(meta=w.m(ResourceKind.VMIRS, "web"), manifest=rs_manifest(n)))
        case ("pool", n) if "default/pool" not in c.resources[ResourceKind.VMPOOL]:
            manifest = pool_manifest(n)
            w.run(ResourceCreated(meta=w.m(ResourceKind.VMPOOL, "pool"), manifest=manifest))
        case ("finalizer" | "unfinalize" as what, name):
            view = c.resources[KINDS[name]].get(f"default/{name}")
            if view is not None:
                meta = dict(view.manifest.get("metadata") or {})
                keep = [f for f in meta.get("finalizers") or [] if f != "example.com/keep"]
                meta["finalizers"] = [*keep, "example.com/keep"] if what == "finalizer" else keep
                fields = ("labels", "annotations", "finalizers", "ownerReferences")
                metadata = {f: meta[f] for f in fields if meta.get(f)}
                w.run(MetadataChanged(meta=w.m(KINDS[name], name), metadata=metadata))
        case ("delete", (kind, name), policy):
            with contextlib.suppress(ApiError):  # not there (any more): NotFound
                _delete(w, kind, name, policy)
        case _:
            pass


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(steps, min_size=1, max_size=12))
def test_the_index_answers_what_a_scan_of_the_views_finds(program: list[Any]) -> None:
    w = Checked()
    w.uids = set()
    w.given(w.node_joined("node-1"), w.node_joined("node-2"))
    for s in program:
        step(w, s)
        w.settle(w.tick())
    rebuilt = Ownership()
    rebuilt.rebuild(w.state.cluster)
    assert vars(rebuilt) == vars(w.state.ownership)
