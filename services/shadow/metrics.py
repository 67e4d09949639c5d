"""What a shadow exports (one process: the default registry)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from services.controller.shadow import REASONS

DIVERGENCE = Counter(
    "virtstream_shadow_divergence",
    "Decisions of a shadow that differ from the live service's for the same cause, by reason "
    "(differs, live-only, shadow-only)",
    ["service", "reason"],
)
REPRODUCED = Counter(
    "virtstream_shadow_reproduced",
    "Decisions of a shadow identical to the live service's for the same cause",
    ["service"],
)
FOLLOWED = Gauge("virtstream_shadow_sequence", "The last event sequence the shadow has read")


def start(service: str) -> None:
    """Every series present from the start, so a rate over the first divergence is right."""
    for reason in REASONS:
        DIVERGENCE.labels(service, reason)
    REPRODUCED.labels(service)
