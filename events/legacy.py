"""Event shapes that are no longer written, and how to read them as current events.

NodeJoined v1 (tag "NodeJoined") reported capacity as whole CPUs and MiB; v2 carries
`Resources` in millicores and bytes, which is what the scheduler counts in.
"""

from __future__ import annotations

from events.catalog import Event, NodeJoined, Resources


class NodeJoinedV1(Event, tag="NodeJoined", frozen=True):
    node: str
    cpus: int
    memory_mib: int
    labels: dict[str, str] = {}


LegacyEvent = NodeJoinedV1


def upcast(event: LegacyEvent) -> Event:
    match event:
        case NodeJoinedV1():
            return NodeJoined(
                meta=event.meta,
                node=event.node,
                capacity=Resources(
                    cpu_millis=event.cpus * 1000, memory_bytes=event.memory_mib * 1024 * 1024
                ),
                labels=event.labels,
            )
