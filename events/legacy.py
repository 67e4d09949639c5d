"""Event shapes that are no longer written, and how to read them as current events.

NodeJoined v1 (tag "NodeJoined") reported capacity as whole CPUs and MiB; v2 carries
`Resources` in millicores and bytes, which is what the scheduler counts in; v3 adds the
node's system info and its pod network (read from v2 as unknown and none).
"""

from __future__ import annotations

from events.catalog import Event, NodeJoined, Resources, Taint


class NodeJoinedV1(Event, tag="NodeJoined", frozen=True):
    node: str
    cpus: int
    memory_mib: int
    labels: dict[str, str] = {}


class NodeJoinedV2(Event, tag="NodeJoined/v2", frozen=True):
    node: str
    capacity: Resources
    labels: dict[str, str] = {}
    taints: tuple[Taint, ...] = ()
    address: str = ""
    hypervisor: str = "test"
    console_port: int = 0


LegacyEvent = NodeJoinedV1 | NodeJoinedV2


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
        case NodeJoinedV2():
            return NodeJoined(
                meta=event.meta,
                node=event.node,
                capacity=event.capacity,
                labels=event.labels,
                taints=event.taints,
                address=event.address,
                hypervisor=event.hypervisor,
                console_port=event.console_port,
            )
