"""Shadow: a second decider fed the live log reproduces today's decisions, and a changed one
is caught as each divergence is read, with both decisions."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import msgspec

from events.catalog import PodScheduled
from events.envelope import Context, Decision, Stored
from services.controller.reactor import ControllerReactor
from services.controller.shadow import Divergence, Shadow
from services.controller.state import ControllerState
from tests.unit.test_whatif import history
from tests.unit.whatif_fixtures import forgetful


def fed(shadow: Shadow, log: list[Stored]) -> list[tuple[int, Divergence]]:
    """Each divergence with the sequence whose read reported it."""
    return [(s.seq, d) for s in log for d in shadow.feed(s)]


def live_decisions(log: list[Stored]) -> list[Stored]:
    return [s for s in log if s.event.meta.actor.service == "virt-controller"]


def test_todays_decider_in_shadow_reproduces_every_live_decision() -> None:
    w = history()
    shadow = Shadow(ControllerReactor(node_timeout=1e9), since=1)
    assert fed(shadow, w.log) == []
    assert shadow.expire(w.now + 3600) == []
    assert shadow.reproduced == len(live_decisions(w.log)) > 30
    assert shadow.ticks == 0


def test_a_forgetful_scheduler_is_caught_when_the_live_placement_is_read() -> None:
    w = history()
    found = fed(Shadow(forgetful(), since=1), w.log)
    placed = [s for s in live_decisions(w.log) if isinstance(s.event, PodScheduled)]
    assert [seq for seq, _ in found] == [s.seq for s in placed]  # at once, none later
    for (_, d), s in zip(found, placed, strict=True):
        assert isinstance(s.event, PodScheduled)
        assert d.reason == "live-only"
        assert d.cause == s.event.meta.causation_seq
        assert d.live is not None and d.live.type == "PodScheduled"
        assert d.live.seq == s.seq and d.live.node == s.event.node
        assert d.shadow is None and d.shadow_event is None
        assert d.live_event is not None and d.live_event["node"] == s.event.node


def test_another_policy_differs_on_placements_with_both_nodes() -> None:
    w = history(churn=False)
    found = fed(
        Shadow(ControllerReactor(node_timeout=1e9, scheduler_policy="pack"), since=1), w.log
    )
    assert found and {d.reason for _, d in found} == {"differs"}
    for _, d in found:
        assert d.live is not None and d.shadow is not None
        assert d.live.type == d.shadow.type == "PodScheduled"
        assert d.live.node != d.shadow.node and "node" in d.live.fields
        assert d.live_event is not None and d.shadow_event is not None
    assert Counter(d.shadow.node for _, d in found if d.shadow)  # packed somewhere


class Eager(ControllerReactor):
    """Decides a placement twice: the second, for a VMI on a node of its own choosing,
    under an id the live controller never makes."""

    def react(self, state: ControllerState, stored: Stored, ctx: Context) -> Sequence[Decision]:
        out = list(super().react(state, stored, ctx))
        for d in list(out):
            if isinstance(d.event, PodScheduled):
                meta = ctx.meta(d.event.meta.aggregate, key=f"eager/{d.event.meta.aggregate.key}")
                out.append(Decision(msgspec.structs.replace(d.event, meta=meta, node="nowhere")))
        return out


def test_a_decision_the_live_one_never_makes_is_shadow_only_after_the_grace() -> None:
    w = history(vms=3, churn=False)
    shadow = Shadow(Eager(node_timeout=1e9), since=1, grace=5.0)
    found = fed(shadow, w.log)
    assert found == []  # the log's times move less than the grace
    assert shadow.expire(w.now + 1.0) == []
    late = shadow.expire(w.now + 10.0)
    assert len(late) == 3 and {d.reason for d in late} == {"shadow-only"}
    assert all(d.shadow is not None and d.shadow.node == "nowhere" for d in late)
    assert shadow.pending == {} and shadow.expire(w.now + 20.0) == []


def test_decisions_before_since_are_folded_not_compared() -> None:
    w = history()
    mid = len(w.log) // 2
    shadow = Shadow(forgetful(), since=mid)
    found = fed(shadow, w.log)
    assert found and all(d.cause >= mid for _, d in found)


def test_memory_is_bounded_by_the_logs_time() -> None:
    w = history()
    shadow = Shadow(ControllerReactor(node_timeout=1e9), since=1, memory=2.0)
    fed(shadow, w.log)
    newest = max(s.time for s in w.log)
    assert all(t >= newest - 2.0 for t in shadow.live_seen.values())
    assert all(t >= newest - 2.0 for t in shadow.shadow_seen.values())
    assert len(shadow.live_seen) < len(live_decisions(w.log)) / 4
