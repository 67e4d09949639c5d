"""A name free again once its object is gone: a finished, deleted migration's name makes a
new migration (a new uid, appended after the old one's last event), and the history of
the name's object is the new one's alone."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from core import commands
from core.commands import Request, Verb
from core.context import RequestContext
from core.errors import ApiError
from events.catalog import Event, MigrationFailed, MigrationRequested
from events.envelope import Stored
from events.meta import Aggregate, Kind
from kinds.registry import REGISTRY
from projections import replay
from services.api.history import History
from tests.factories import meta, vmi_manifest, with_namespaces

_ids = itertools.count(1)


class Log:
    """Decisions folded as the api's projection would, and kept as the stream keeps them."""

    def __init__(self) -> None:
        self.cluster = with_namespaces()
        self.stored: list[Stored] = []

    def fold(self, event: Event) -> None:
        s = Stored(seq=len(self.stored) + 1, subject="", time=0.0, event=event)
        self.stored.append(s)
        self.cluster.apply(s)

    def run(self, verb: Verb, kind: str, name: str = "", body: Any = None) -> commands.Outcome:
        data = b"" if body is None else json.dumps(body).encode()
        req = Request(
            verb=verb, spec=REGISTRY.resource(kind), namespace="default", name=name, body=data
        )
        ctx = RequestContext(
            now=1000.0 + len(self.stored),
            correlation_id="req",
            new_id=lambda: f"{next(_ids):032x}",
            suffix=lambda: "abcde",
        )
        outcome = commands.decide(commands.decode(req), self.cluster, ctx, REGISTRY.updatable)
        for append in outcome.appends:
            self.fold(append.event)
        return outcome


def _migration(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": name},
        "spec": {"vmiName": "v1"},
    }


def _failed(log: Log, name: str) -> None:
    log.fold(MigrationFailed(meta=meta(Kind.MIGRATION, name, at=1001.0), reason="NoTarget"))


def test_a_finished_deleted_migrations_name_makes_a_new_migration() -> None:
    log = Log()
    log.run(Verb.CREATE, "vmi", body=vmi_manifest("v1"))
    first = log.run(Verb.CREATE, "vmim", body=_migration("mig-two"))
    old_uid = log.cluster.migrations["default/mig-two"].uid
    assert first.appends[0].expected == 0
    _failed(log, "mig-two")
    # a finished migration not deleted still holds its name
    with pytest.raises(ApiError) as exc:
        log.run(Verb.CREATE, "vmim", body=_migration("mig-two"))
    assert exc.value.code == 409 and exc.value.status.reason == "AlreadyExists"
    log.run(Verb.DELETE, "vmim", "mig-two")
    version = log.cluster.migrations["default/mig-two"].version
    again = log.run(Verb.CREATE, "vmim", body=_migration("mig-two"))
    # appended after the old one's last event, under the name's aggregate
    assert again.appends[0].expected == version
    assert isinstance(again.appends[0].event, MigrationRequested)
    new = log.cluster.migrations["default/mig-two"]
    assert new.uid != old_uid and new.phase == "Pending" and not new.deleted
    assert new.failure_reason == "" and new.transitions[0][0] == "Pending"
    assert len(new.transitions) == 1


def test_the_new_objects_history_is_its_own() -> None:
    log = Log()
    log.run(Verb.CREATE, "vmi", body=vmi_manifest("v1"))
    log.run(Verb.CREATE, "vmim", body=_migration("mig-two"))
    _failed(log, "mig-two")
    log.run(Verb.DELETE, "vmim", "mig-two")
    log.run(Verb.CREATE, "vmim", body=_migration("mig-two"))
    new_uid = log.cluster.migrations["default/mig-two"].uid
    agg = Aggregate(kind=Kind.MIGRATION, namespace="default", name="mig-two")
    steps = replay.current_life(list(replay.replay_steps(log.stored, agg)))
    assert [type(st.stored.event).__name__ for st in steps] == ["MigrationRequested"]
    assert steps[0].born and steps[0].rendered is not None
    assert steps[0].rendered["metadata"]["uid"] == new_uid
    # the api's history (the console's), built incrementally, says the same
    history = History(agg)
    for s in log.stored:
        history.extend([s])
    assert [step["type"] for step in history.document()["steps"]] == ["MigrationRequested"]
