"""Deciders changed on purpose, for `virtstream whatif --decider controller=MODULE:FACTORY`
to catch (tests only)."""

from __future__ import annotations

from collections.abc import Sequence

from events.catalog import PodScheduled
from events.envelope import Context, Decision, Stored
from services.controller.reactor import ControllerReactor
from services.controller.state import ControllerState


class ForgetfulScheduler(ControllerReactor):
    """Schedules a VMI only on a tick, never on the event that made it pending."""

    def react(self, state: ControllerState, stored: Stored, ctx: Context) -> Sequence[Decision]:
        decided = super().react(state, stored, ctx)
        return [d for d in decided if not isinstance(d.event, PodScheduled)]


def forgetful() -> ControllerReactor:
    return ForgetfulScheduler()
