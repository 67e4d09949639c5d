"""The controller's incremental placement index always equals a full scan of the cluster.

Runs existing World scenarios (scheduling, stops, crashes, migrations, drains, node
failures) with a fold that checks the index against a scan after every event."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from events.catalog import Event
from events.envelope import Stored
from projections.allocation import node_allocated
from services.controller.placement_index import PlacementIndex, has_required_anti_affinity
from services.controller.scheduler import held_addresses, needs_node
from tests.unit import (
    test_controller_backoff,
    test_controller_migration,
    test_controller_node_health,
    test_controller_run_strategy,
    test_controller_scheduler,
    test_controller_world,
)
from tests.unit.test_controller_world import World


def assert_index_matches(w: World) -> None:
    c, index = w.state.cluster, w.state.index
    for node in {*c.nodes, *c.vmis_by_node}:
        assert index.allocated(c, node) == node_allocated(c, node)[:2], node
    assert {v.name for v in c.vmis.values() if needs_node(v)} <= {v.name for v in index.pending(c)}
    assert index.unplaced == {k for k, v in c.vmis.items() if not v.final and not v.node}
    assert index.anti_affine == {
        k
        for k, v in c.vmis.items()
        if not v.final and v.node and has_required_anti_affinity(v.manifest)
    }
    assert index.active_migrations == {k for k, m in c.migrations.items() if not m.final}
    for network in {"", *index.held}:  # the addresses held, as a scan finds them
        assert held_addresses(c, network, index) == held_addresses(c, network), network
    rebuilt = PlacementIndex()
    rebuilt.rebuild(c)
    assert rebuilt.unplaced == index.unplaced
    assert rebuilt.anti_affine == index.anti_affine
    assert {n: s for n, s in rebuilt.held.items() if s} == {
        n: s for n, s in index.held.items() if s
    }


def _scenarios() -> list[Callable[[], Any]]:
    out = []
    for module in (
        test_controller_world,
        test_controller_scheduler,
        test_controller_run_strategy,
        test_controller_backoff,
        test_controller_node_health,
        test_controller_migration,
    ):
        for name in sorted(dir(module)):
            fn = getattr(module, name)
            if (
                name.startswith("test_")
                and callable(fn)
                and fn.__module__ == module.__name__
                and not inspect.signature(fn).parameters  # parametrized ones need pytest
            ):
                out.append(fn)
    return out


@pytest.mark.parametrize(
    "scenario", _scenarios(), ids=lambda f: f"{f.__module__.rsplit('.', 1)[-1]}::{f.__name__}"
)
def test_index_equals_a_full_scan_after_every_event(
    scenario: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    fold = World.fold

    def checked_fold(self: World, ev: Event) -> Stored:
        s = fold(self, ev)
        assert_index_matches(self)
        return s

    monkeypatch.setattr(World, "fold", checked_fold)
    scenario()
