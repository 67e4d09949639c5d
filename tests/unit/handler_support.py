"""Builders for the handler decider's unit tests: events routed to a node, launcher
snapshots, migration reads, and a stand-in for the shell's handling of notes."""

from __future__ import annotations

from collections.abc import Sequence

from msgspec.structs import replace

from events import subjects
from events.catalog import (
    Event,
    MigrationScheduled,
    MigrationSettings,
    PodScheduled,
    Resources,
    TargetPrepared,
)
from events.codec import event_type
from events.envelope import Context, Stored
from events.meta import Actor, Aggregate, Kind, Meta
from projections.views import MigrationView
from services.handler.effects import Observed
from services.handler.node_info import NodeConfig
from services.handler.reactor import HandlerReactor, HandlerState, Output
from services.launcher.domain_state import DomainState
from services.launcher.protocol import DomainStatus
from services.runtime.reactor import Note

NODE = "node-1"
TARGET = "node-2"
VMI_UID = "vmi-uid"
MIG = Aggregate(Kind.MIGRATION, "default", "m1", "mig-uid")
VMI = Aggregate(Kind.VMI, "default", "vm1", VMI_UID)
MANIFEST = {
    "metadata": {"name": "vm1", "namespace": "default"},
    "spec": {"domain": {"memory": {"guest": "64Mi"}}, "terminationGracePeriodSeconds": 0},
}


def decider(node: str = NODE, *, qemu: bool = False) -> HandlerReactor:
    return HandlerReactor(
        NodeConfig(name=node, address="10.0.0.1"),
        capacity=Resources(cpu_millis=4000, memory_bytes=8 * 1024**3),
        labels={"kubernetes.io/hostname": node},
        qemu=qemu,
        hypervisor_uri="qemu+unix:///system?socket=/n/sock",
    )


def meta(agg: Aggregate, node: str, n: int) -> Meta:
    return Meta(
        event_id=f"e{n}",
        aggregate=agg,
        occurred_at=float(n),
        correlation_id="corr",
        actor=Actor(service="test"),
        node=node,
    )


def stored(event: Event, seq: int) -> Stored:
    agg = event.meta.aggregate
    return Stored(seq, subjects.event_subject(agg, event_type(event), event.meta.node), 0.0, event)


def ctx(now: float, d: HandlerReactor) -> Context:
    return Context(d.name, d.node, now, None)


def deliver(
    d: HandlerReactor, state: HandlerState, event: Event, seq: int, now: float
) -> list[Output]:
    """As the shell does for a delivered event: fold, react, take in the notes."""
    s = stored(event, seq)
    d.evolve(state, s)
    return settle(d, state, d.react(state, s, ctx(now, d)))


def settle(d: HandlerReactor, state: HandlerState, outputs: Sequence[Output]) -> list[Output]:
    """Fold the notes where they stand (as the shell does); the rest is what was asked."""
    rest: list[Output] = []
    for out in outputs:
        if isinstance(out, Note):
            d.observe(state, out.observation)
        else:
            rest.append(out)
    return rest


def pod_scheduled(seq: int = 1, node: str = NODE) -> PodScheduled:
    return PodScheduled(
        meta=meta(VMI, node, seq), node=node, pod_name="pod", pod_uid="pod-1", manifest=MANIFEST
    )


def launcher(state: DomainState | None, **kw: object) -> Observed:
    o = Observed(uid=VMI_UID, pid=42, connected=True, domain_name="default_vm1")
    if state is not None:
        o = o.updated(DomainStatus(state=state, seq=1), 0.0)
    return replace(o, **kw)


def scheduled(settings: MigrationSettings | None = None) -> MigrationScheduled:
    return MigrationScheduled(
        meta=meta(MIG, TARGET, 10),
        vmi_name="vm1",
        vmi_uid=VMI_UID,
        source_node=NODE,
        source_pod="pod",
        target_node=TARGET,
        target_pod="tpod",
        target_pod_uid="tpod-uid",
        settings=settings or MigrationSettings(),
        manifest=MANIFEST,
    )


def prepared(seq: int = 12) -> TargetPrepared:
    return TargetPrepared(
        meta=meta(MIG, NODE, seq),
        target_node=TARGET,
        target_address="10.0.0.2",
        target_pod_uid="tpod-uid",
    )


def view(phase: str, version: int, **kw: object) -> MigrationView:
    base: dict[str, object] = dict(
        manifest_json=b"{}",
        namespace="default",
        name="m1",
        uid="mig-uid",
        vmi_name="vm1",
        vmi_uid=VMI_UID,
        created_at=1.0,
        version=version,
        resource_version=version,
        phase=phase,
        source_node=NODE,
        target_node=TARGET,
        target_address="10.0.0.2",
    )
    base.update(kw)
    return MigrationView(**base)  # type: ignore[arg-type]
