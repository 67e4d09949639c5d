from typing import Any

import pytest
from msgspec import inspect as mi

from events import unknown_fields
from kinds.registry import REGISTRY


def test_prepared_kinds_need_no_type_info_on_their_first_document(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # an empty cache: what other tests compiled before must not do prepare's work
    monkeypatch.setattr(unknown_fields, "_STRUCTS", {})
    unknown_fields.prepare(spec.object_type for spec in REGISTRY)

    def compiled_again(_: Any) -> Any:
        raise AssertionError("compiled on a document, not at the start")

    monkeypatch.setattr(mi, "type_info", compiled_again)
    for spec in REGISTRY:
        doc = {"metadata": {"name": "x", "frobnicate": 1}, "frob": True}
        assert unknown_fields.unknown_fields(doc, spec.object_type) == [
            "metadata.frobnicate",
            "frob",
        ], spec.kind
