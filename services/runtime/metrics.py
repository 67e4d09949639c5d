"""Metrics every service shell exports (one process per service, so the default registry)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

EVENTS_HANDLED = Counter(
    "virtstream_events_handled_total", "Events a service consumed", ["service", "type"]
)
EVENTS_APPENDED = Counter(
    "virtstream_events_appended_total", "Events a service appended", ["service", "type"]
)
HANDLING_SECONDS = Histogram(
    "virtstream_event_handling_seconds",
    "Time from delivery to ack, by service and event type",
    ["service", "type"],
    buckets=LATENCY_BUCKETS,
)
HOP_SECONDS = Histogram(
    "virtstream_choreography_hop_seconds",
    "Cause → effect latency: the cause's occurred_at to the effect's append",
    ["hop"],
    buckets=LATENCY_BUCKETS,
)
CONSUMER_PENDING = Gauge(
    "virtstream_consumer_pending", "Messages the service's consumer has not delivered", ["service"]
)
CONFLICTS = Counter(
    "virtstream_optimistic_conflicts_total",
    "Appends rejected by optimistic concurrency",
    ["service"],
)
DEAD_LETTERS = Counter(
    "virtstream_dead_letters_total", "Messages parked in the dead-letter stream", ["service"]
)
DUPLICATES = Counter(
    "virtstream_duplicate_appends_total", "Appends JetStream dropped as duplicates", ["service"]
)
