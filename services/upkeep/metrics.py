"""What the upkeep service exports (one process: the default registry)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

ACTIVE = Gauge("virtstream_upkeep_active", "1 while this upkeep process holds the lease")
INDEXED = Gauge(
    "virtstream_upkeep_indexed_sequence", "The last event sequence the debugging index covers"
)
FLOOR = Gauge(
    "virtstream_upkeep_hot_floor_sequence",
    "The hot log's floor: every event from here on is in the hot log, older ones in the archive",
)
PENDING = Gauge(
    "virtstream_upkeep_pending_aggregates",
    "Ended aggregates found under the floor and not yet out of the hot log",
)
RETIRED = Counter(
    "virtstream_upkeep_retired_aggregates_total", "Ended aggregates purged from the hot log"
)
