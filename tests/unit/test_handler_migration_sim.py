"""The test-mode transfer simulation (pure)."""

from __future__ import annotations

from events.catalog import MigrationSettings
from services.handler.migration_sim import (
    DEFAULT_RATE,
    Done,
    GiB,
    Progress,
    TimedOut,
    begin,
    step,
)

MiB = 1024**2


def manifest(memory: str) -> dict[str, object]:
    return {"spec": {"domain": {"resources": {"requests": {"memory": memory}}}}}


def test_unlimited_bandwidth_uses_the_default_rate_and_reports_throttled() -> None:
    t = begin("m", manifest("2Gi"), MigrationSettings(), now=100.0)
    assert t.rate == DEFAULT_RATE and t.total == 2 * GiB
    first = step(t, 100.5)
    assert first == Progress(GiB // 2, 2 * GiB - GiB // 2, 2 * GiB)
    assert step(t, 100.6) is None  # < 0.25 s since the last report
    assert isinstance(step(t, 100.8), Progress)
    assert step(t, 102.0) == Done()


def test_bandwidth_setting_slows_it_and_the_completion_deadline_aborts() -> None:
    s = MigrationSettings(bandwidth_bytes_per_second=MiB, completion_timeout_per_gib=150)
    t = begin("m", manifest("1Gi"), s, now=0.0)  # 1024 s at 1 MiB/s, deadline 150 s
    assert step(t, 10.0) == Progress(10 * MiB, GiB - 10 * MiB, GiB)
    out = step(t, 151.0)
    assert isinstance(out, TimedOut) and "not completed after 150 sec" in out.reason
    assert step(t, 152.0) is None  # aborted: nothing more
