"""The api's Prometheus metrics (the default registry: one api per process)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from services.runtime.metrics import LATENCY_BUCKETS

REQUESTS = Counter(
    "virtstream_api_requests_total",
    "HTTP requests by method, route and code",
    ["method", "route", "code"],
)
REQUEST_SECONDS = Histogram(
    "virtstream_api_request_seconds",
    "HTTP request latency by method and route (watches: until the stream ends)",
    ["method", "route"],
    buckets=LATENCY_BUCKETS,
)
APPENDS = Counter("virtstream_api_appends_total", "Events the api appended", ["type"])
CONFLICTS = Counter(
    "virtstream_api_optimistic_conflicts_total", "Appends rejected by optimistic concurrency"
)
