"""Crash-loop backoff: growth, cap, deterministic jitter, reset."""

from __future__ import annotations

from events.catalog import StopReason, VMRunStrategyChanged, VMStartFailed
from events.meta import Kind
from services.controller.backoff import BackoffConfig, delay
from tests.unit.test_controller_world import World, of, types


def crash_before_running(w: World) -> list:
    """The launcher starts but the domain crashes before it ever runs."""
    w.run(w.launcher_started())
    return w.stop_guest(reason=StopReason.CRASHED)


def test_delay_grows_with_the_square_and_is_capped() -> None:
    cfg = BackoffConfig(base=5.0, max_delay=300.0, jitter=0.2)
    ds = [delay(n, "uid-x", cfg) for n in range(1, 10)]
    for n, d in enumerate(ds[:5], start=1):
        assert 5.0 * n * n <= d <= 5.0 * n * n * 1.2
    assert ds == sorted(ds) and ds[-1] == 300.0
    assert delay(3, "uid-x", cfg) == delay(3, "uid-x", cfg)  # deterministic
    assert delay(3, "uid-x", cfg) != delay(3, "uid-y", cfg)  # jitter from the uid


def test_a_vmi_that_never_ran_counts_a_failure_and_delays_the_next() -> None:
    w = World(backoff_config=BackoffConfig(base=10.0, max_delay=300.0))
    w.given(w.node_joined("node1"))
    w.run(w.vm_created())
    failed_uid = w.vmi().uid  # type: ignore[union-attr]
    out = crash_before_running(w)
    assert types(out) == ["VMStartFailed", "VMIDeleteRequested", "VMIRemoved"]  # no VMICreated
    sf = of(out, VMStartFailed)[0]
    assert sf.consecutive_fail_count == 1 and sf.last_failed_vmi_uid == failed_uid
    assert w.now + 10 <= sf.retry_after <= w.now + 12
    assert w.tick() == []  # still backing off
    w.now = sf.retry_after + 0.1
    out = w.settle(w.tick())
    assert types(out) == ["VMICreated", "PodScheduled"]
    # a second failure waits longer
    out = crash_before_running(w)
    sf2 = of(out, VMStartFailed)[0]
    assert sf2.consecutive_fail_count == 2 and sf2.retry_after - w.now >= 40


def test_the_deadline_counts_from_the_failed_vmis_end_whenever_it_is_noticed() -> None:
    """A replay may notice the failure on a later event than the live controller did; both
    must decide the same deadline."""
    cfg = BackoffConfig(base=10.0)
    deadlines = []
    for late in (0.0, 7.0):
        w = World(backoff_config=cfg)
        w.given(w.node_joined("node1"))
        w.run(w.vm_created())
        failed_uid = w.vmi().uid  # type: ignore[union-attr]
        w.run(w.launcher_started())
        ended = w.now
        w.given(w.domain_stopped(reason=StopReason.CRASHED))  # folded, not yet reacted to
        w.now += late
        sf = of(w.when(w.launcher_exited()), VMStartFailed)[0]
        deadlines.append(sf.retry_after)
    assert deadlines[0] == deadlines[1] == ended + delay(1, failed_uid, cfg)


def test_backoff_is_capped() -> None:
    w = World(backoff_config=BackoffConfig(base=10.0, max_delay=30.0))
    w.given(w.node_joined("node1"))
    w.run(w.vm_created())
    for n in range(1, 5):
        sf = of(crash_before_running(w), VMStartFailed)[0]
        assert sf.consecutive_fail_count == n and sf.retry_after - w.now <= 30.0
        w.now = sf.retry_after + 1
        w.settle(w.tick())


def test_reaching_running_clears_the_failure() -> None:
    w = World(backoff_config=BackoffConfig(base=1.0))
    w.given(w.node_joined("node1"))
    w.run(w.vm_created())
    crash_before_running(w)
    w.now += 10
    w.settle(w.tick())
    w.run(w.launcher_started())
    out = w.run(w.domain_started())
    assert types(out) == ["VMStartFailureCleared"]
    assert w.vm().start_failure is None


def test_manual_or_halted_clears_the_failure() -> None:
    w = World()
    w.given(w.node_joined("node1"))
    w.run(w.vm_created())
    crash_before_running(w)
    assert w.vm().start_failure is not None
    out = w.run(VMRunStrategyChanged(meta=w.m(Kind.VM, "vm1"), run_strategy="Halted"))
    assert types(out) == ["VMStartFailureCleared"]


def test_a_failure_is_recorded_once_per_vmi() -> None:
    w = World()
    w.given(w.node_joined("node1"))
    w.run(w.vm_created())
    w.run(w.launcher_started())
    s = w.fold(w.domain_stopped(reason=StopReason.CRASHED))
    first = w.react(s)
    w.settle(first)
    again = w.react(s)
    assert of(again, VMStartFailed) == [] and w.vm().start_failure.consecutive_fail_count == 1  # type: ignore[union-attr]
