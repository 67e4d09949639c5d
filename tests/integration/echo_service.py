"""A minimal service for testing the shell: every VMStartRequested is echoed as a
VMIPauseRequested on the VMI of the same name (not level-triggered on purpose, so only the
deterministic event ids stand between a redelivery and a duplicate).

Run as a process: python -m tests.integration.echo_service URL STREAM [--crash-after-append]
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence

from events import subjects
from events.catalog import Event, VMIPauseRequested, VMStartRequested
from events.envelope import Appended, Context, Decision, Stored
from events.meta import Aggregate, Kind
from eventstore.connection import connect_service
from eventstore.jetstream import JetStreamStore
from eventstore.settings import StreamSettings
from services.runtime.shell import ServiceShell


class Echo:
    name = "echo"

    def filters(self) -> Sequence[str]:
        return [subjects.kind_filter(Kind.VM)]

    def initial_state(self) -> int:
        return 0

    def holds(self, state: int, key: str) -> bool:
        return True  # keeps every version

    def evolve(self, state: int, stored: Stored) -> int:
        return state + 1

    def react(self, state: int, stored: Stored, ctx: Context) -> Sequence[Decision]:
        match stored.event:
            case VMStartRequested(meta=m):
                if m.aggregate.name == "poison":
                    raise ValueError("decider refuses poison")
                vmi = Aggregate(
                    kind=Kind.VMI, namespace=m.aggregate.namespace, name=m.aggregate.name
                )
                return [Decision(VMIPauseRequested(meta=ctx.meta(vmi)), occ=False)]
        return []

    def tick(self, state: int, ctx: Context) -> Sequence[Decision]:
        return []


class CrashingStore(JetStreamStore):
    """Dies like kill -9 right after its first append, before the shell acks."""

    async def append(
        self, event: Event, *, expected: int | None = None, msg_id: str | None = None
    ) -> Appended:
        await super().append(event, expected=expected, msg_id=msg_id)
        os._exit(137)


async def main(url: str, stream: str, crash: bool) -> None:
    nc = await connect_service(url, "echo")
    settings = StreamSettings(name=stream, dlq_name=f"{stream}_DLQ", storage="memory")
    store = (CrashingStore if crash else JetStreamStore)(nc, settings)
    shell = ServiceShell(Echo(), store, tick_interval=0.2, ack_wait=1.0)
    await shell.run()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], "--crash-after-append" in sys.argv))
