"""A generic kind as its module holds it, and nothing else: its object type and its
registry entry (`tests/integration/test_api_new_kind.py` and `tests/unit/test_kind_registry.py`
register it beside the real kinds)."""

from __future__ import annotations

import msgspec

from events.objects import SpecObject
from kinds.columns import PrinterColumn
from kinds.resource import resource_spec

GROUP, VERSION = "toys.virtstream.io", "v1alpha1"


class Gadget(SpecObject):
    api_version: str = msgspec.field(default_factory=lambda: f"{GROUP}/{VERSION}")
    kind: str = msgspec.field(default_factory=lambda: "Gadget")


SPEC = resource_spec(
    group=GROUP,
    version=VERSION,
    kind="Gadget",
    plural="gadgets",
    singular="gadget",
    short_names=("gd", "gds"),
    event_kind="gadget",
    object_type=Gadget,
    printer_columns=(
        PrinterColumn("Color", "string", ".spec.color"),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
    ),
)
