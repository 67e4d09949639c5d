"""Metrics every service shell exports (one process per service, so the default registry)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

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
PIPELINE_WAITS = Counter(
    "virtstream_pipeline_waits_total",
    "Decisions made again after waiting for appends in flight to the same aggregate",
    ["service"],
)


class HeartbeatAges:
    """`virtstream_node_heartbeat_age_seconds{node}`, computed at scrape time from the last
    heartbeat the controller saw in the KV bucket, and the timeout it applies
    (`virtstream_node_heartbeat_timeout_seconds`), so an alert can compare the two without
    hard-coding the controller's setting. A stopped handler makes its node's age grow."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.seen: dict[str, float] = {}
        self.timeout: float | None = None

    def record(self, node: str, at: float) -> None:
        self.seen[node] = max(at, self.seen.get(node, 0.0))

    def forget(self, node: str) -> None:
        self.seen.pop(node, None)

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        now = self.clock()
        age = GaugeMetricFamily(
            "virtstream_node_heartbeat_age_seconds",
            "Seconds since the node's handler last heartbeat, as seen by the controller",
            labels=["node"],
        )
        for node, at in sorted(self.seen.items()):
            age.add_metric([node], max(0.0, now - at))
        yield age
        if self.timeout is not None:
            yield GaugeMetricFamily(
                "virtstream_node_heartbeat_timeout_seconds",
                "Heartbeat age after which the controller declares a node unresponsive",
                value=self.timeout,
            )


# The controller records what it sees: HEARTBEATS.record(node, at); HEARTBEATS.timeout = t
HEARTBEATS = HeartbeatAges()
REGISTRY.register(HEARTBEATS)
