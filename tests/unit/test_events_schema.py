"""The published JSON Schemas: one per event tag and intent body, up to date in docs/."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from events import codec
from events.catalog import DomainStarted
from events.meta import Actor, Aggregate, Kind, Meta
from events.schema import INTENTS, documents, event_types, file_name, main, tag, write

REPO = Path(__file__).resolve().parents[2]


def test_every_event_tag_and_intent_has_a_schema() -> None:
    docs = documents()
    index = docs["index.json"]
    assert len(index["events"]) == len(event_types()) > 40
    for t in event_types():
        path = f"events/{file_name(tag(t))}"
        assert index["events"][tag(t)] == path
        assert docs[path]["$defs"][t.__name__]["properties"]["type"] == {"enum": [tag(t)]}
    assert set(index["intents"]) == set(INTENTS)
    assert "NodeJoined/v3" in index["events"]  # versioned with its tag


def test_an_encoded_event_has_the_fields_its_schema_requires() -> None:
    meta = Meta(
        event_id="e" * 32,
        aggregate=Aggregate(kind=Kind.VMI, namespace="default", name="vm1", uid="u"),
        occurred_at=1.0,
        correlation_id="c",
        actor=Actor(service="s"),
    )
    event = json.loads(codec.encode(DomainStarted(meta=meta, node="n1", domain="d")))
    schema = documents()[f"events/{file_name('DomainStarted')}"]["$defs"]["DomainStarted"]
    assert set(schema["required"]) <= set(event)
    assert set(event) <= set(schema["properties"])


def test_the_docs_are_up_to_date(tmp_path: Path) -> None:
    assert main(["--out", str(REPO / "docs" / "events"), "--check"]) == 0
    write(tmp_path)
    (tmp_path / "events" / "DomainStarted.json").write_text("{}")
    assert main(["--out", str(tmp_path), "--check"]) == 1
    assert msgspec.json.decode((REPO / "docs/events/index.json").read_bytes())["events"]
