"""A background task's stop ends it even when it swallowed the cancel: on Python 3.11
asyncio.wait_for (nats-py's requests) loses a cancel that lands as what it awaits
completes, and a stop that cancelled once and waited hung (an indexer stopped as it
caught up, about one run in five under load)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, cast

import pytest

from eventstore.index import Indexer
from projections.cluster import Cluster
from readside.runner import ProjectionRunner
from services.upkeep.retire import ClusterViews, Retirer


async def _stubborn() -> None:
    """Goes on after its first cancel, as a task whose wait_for lost it does."""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(30)
    await asyncio.sleep(30)


def _indexer() -> Any:
    return Indexer(cast(Any, None))


def _runner() -> Any:
    return ProjectionRunner(cast(Any, None))


def _retirer() -> Any:
    return Retirer(cast(Any, None), ClusterViews(Cluster))


@pytest.mark.parametrize(
    "make", [_indexer, _runner, _retirer], ids=["indexer", "runner", "retirer"]
)
async def test_stop_ends_a_task_that_swallowed_its_cancel(make: Any) -> None:
    background = make()
    background._task = asyncio.create_task(_stubborn())
    await asyncio.sleep(0)  # running, in its first sleep
    stopping = asyncio.ensure_future(background.stop())
    done, _ = await asyncio.wait({stopping}, timeout=2.0)  # waits; cancels nothing
    task = background._task
    if not done:  # the old way: hung on the task; end both for the next test
        task.cancel()
        stopping.cancel()
    assert done and task.done()
