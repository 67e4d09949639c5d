"""View records: what the projections remember about each aggregate.

Plain msgspec Structs, replaced (never mutated) by the evolve functions. `version` is the
aggregate's own last stream sequence (what an optimistic append expects);
`resource_version` is the last sequence that changed the rendered object, including
changes caused by other aggregates' events (a VMI's phase changes its VM's status)."""

from __future__ import annotations

from typing import Any

import msgspec

from events.catalog import Attachment, InterfaceStatus, NodeSystemInfo, Resources, Taint

Manifest = dict[str, Any]

# Views keep the user's manifest as compact JSON (`manifest_json`) and decode it per use
# (`.manifest`): a decoded KubeVirt object costs ~5x its JSON in dicts and strings, held
# once per view in every process that folds the cluster (api, controller). Callers on hot
# paths keep only the small values they derive from it (placement_index.py).
_manifest_decoder = msgspec.json.Decoder(dict[str, Any])
_manifest_encoder = msgspec.json.Encoder()


def pack_manifest(manifest: Manifest) -> bytes:
    return _manifest_encoder.encode(manifest)


def unpack_manifest(data: bytes) -> Manifest:
    """A fresh dict per call: callers may modify it."""
    return _manifest_decoder.decode(data)


class StateChangeRequest(msgspec.Struct, frozen=True):
    action: str  # Start | Stop
    uid: str = ""  # the VMI uid a Stop is for
    grace_period_seconds: int | None = None  # a Stop's override of the VMI's grace period
    seq: int = 0  # the request's event: what the queue is named by when it is cleared


class StartFailure(msgspec.Struct, frozen=True):
    consecutive_fail_count: int
    last_failed_vmi_uid: str
    retry_after: float


class ManifestView(msgspec.Struct, frozen=True, kw_only=True):
    """A view of an object the user wrote: its manifest kept as compact JSON (a decoded
    manifest costs ~5x the memory), decoded per use."""

    manifest_json: bytes  # pack_manifest(manifest)

    @property
    def manifest(self) -> Manifest:
        return unpack_manifest(self.manifest_json)

    # a cheap look at the JSON first: most objects have none of these
    @property
    def finalizers(self) -> list[str]:
        """The finalizers it still waits for (none: once deleted, it may go)."""
        if b'"finalizers"' not in self.manifest_json:
            return []
        return list((self.manifest.get("metadata") or {}).get("finalizers") or [])

    @property
    def marked(self) -> bool:
        """Its deletion has begun (`metadata.deletionTimestamp`), waiting for finalizers."""
        if b'"deletionTimestamp"' not in self.manifest_json:
            return False
        return bool((self.manifest.get("metadata") or {}).get("deletionTimestamp"))

    @property
    def owners(self) -> list[str]:
        """The uids its owner references name (a reference without one names none)."""
        if b'"ownerReferences"' not in self.manifest_json:
            return []
        refs = (self.manifest.get("metadata") or {}).get("ownerReferences") or []
        return [str(r["uid"]) for r in refs if isinstance(r, dict) and r.get("uid")]


class PhasedView(ManifestView, frozen=True, kw_only=True):
    phase: str = "Pending"

    @property
    def final(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


class VMView(ManifestView, frozen=True, kw_only=True):
    namespace: str
    name: str
    uid: str
    run_strategy: str
    created_at: float
    version: int
    resource_version: int
    generation: int = 1
    deleted_at: float | None = None
    deletion_grace_period_seconds: int | None = None
    requests: tuple[StateChangeRequest, ...] = ()
    start_paused: bool = False
    start_failure: StartFailure | None = None
    #: VMICreateFailed's: the refusal of the VMI's create, and the generation it refused
    create_failure: str = ""
    create_failure_generation: int = 0
    vmi_uid: str = ""  # the current VMI's uid, "" when none
    # VMRevisionRecorded's instance type and preference (compact JSON, b"" when none)
    revision_json: bytes = b""

    @property
    def revision(self) -> dict[str, Any]:
        """{"instancetype": {...}, "preference": {...}} as recorded (each may be absent)."""
        return unpack_manifest(self.revision_json) if self.revision_json else {}


class VMIView(PhasedView, frozen=True, kw_only=True):
    namespace: str
    name: str
    uid: str
    created_at: float
    version: int
    resource_version: int
    owner_vm_uid: str = ""
    reason: str = ""
    message: str = ""
    transitions: tuple[tuple[str, float], ...] = ()
    node: str = ""
    pod_name: str = ""
    pod_uid: str = ""
    #: PodScheduled's: the VMI's address on the pod network, kept across migrations
    pod_address: str = ""
    attachments: tuple[Attachment, ...] = ()  # PodScheduled's: on secondary networks
    launcher_pid: int = 0
    launcher_exited: bool = False
    qemu_pid: int = 0
    domain_type: str = ""  # DomainStarted's: "qemu" = software emulation (TCG)
    paused: bool = False
    pause_reason: str = ""  # DomainPaused's (PausedByUser, PausedIOError, Unknown, ...)
    #: the handler gave up on the domain (VMIWarning SyncFailed): KubeVirt's Synchronized
    #: False condition, until the domain is heard from again
    sync_failure: str = ""
    #: hotplugged volumes attached to the domain: (name, target)
    volume_targets: tuple[tuple[str, str], ...] = ()
    agent_connected: bool = False  # GuestAgentChanged: KubeVirt's AgentConnected condition
    interfaces: tuple[InterfaceStatus, ...] = ()  # GuestInterfacesChanged: status.interfaces
    ever_running: bool = False
    unschedulable: str = ""  # the scheduler's message while no node fits
    deletion_requested_at: float | None = None
    grace_period_seconds: int | None = None
    start_paused: bool = False
    migration: str = ""  # name of the migration that last touched this VMI
    active_pods: tuple[tuple[str, str], ...] = ()  # (pod uid, node)


class MigrationView(PhasedView, frozen=True, kw_only=True):
    namespace: str
    name: str
    uid: str
    vmi_name: str
    created_at: float
    version: int
    resource_version: int
    transitions: tuple[tuple[str, float], ...] = ()
    vmi_uid: str = ""
    source_node: str = ""
    source_pod: str = ""
    target_node: str = ""
    target_pod: str = ""
    target_pod_uid: str = ""
    target_address: str = ""
    start_timestamp: float | None = None
    end_timestamp: float | None = None
    failure_reason: str = ""
    abort_requested: bool = False
    abort_status: str = ""
    mode: str = ""
    policy: str = ""
    data_processed: int = 0
    data_remaining: int = 0
    data_total: int = 0
    deleted: bool = False
    message: str = ""

    @property
    def gone(self) -> bool:
        """Deleted and finished: gone for readers (Kubernetes deletes it), its name free."""
        return self.deleted and self.final


class NodeView(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    capacity: Resources
    created_at: float
    version: int
    resource_version: int
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}  # the users' (the server's are added on render)
    taints: tuple[Taint, ...] = ()
    #: when each of `taints` was added (the same order): a NoExecute taint's `timeAdded`,
    #: from which a toleration's `tolerationSeconds` counts
    taints_added: tuple[float, ...] = ()
    address: str = ""
    hypervisor: str = "test"
    console_port: int = 0
    info: NodeSystemInfo = msgspec.field(default_factory=NodeSystemInfo)
    pod_cidr: str = ""  # NodeJoined's: the node's subnet of the pod network
    pod_network_message: str = ""  # NodeJoined's: why it has none
    cordoned: bool = False
    unresponsive: bool = False
    last_heartbeat: float = 0.0
    draining: bool = False

    @property
    def schedulable(self) -> bool:
        return not (self.cordoned or self.unresponsive)


class PolicyView(ManifestView, frozen=True, kw_only=True):
    name: str
    uid: str
    created_at: float
    version: int
    resource_version: int

    @property
    def manifest(self) -> Manifest:
        return unpack_manifest(self.manifest_json)


class ResourceView(ManifestView, frozen=True, kw_only=True):
    """An object of a generic kind (one without events of its own): the user's manifest
    (spec) and the status its controller last recorded, both compact JSON."""

    namespace: str
    name: str
    uid: str
    created_at: float
    version: int
    resource_version: int
    generation: int = 1
    status_json: bytes = b""

    @property
    def status(self) -> Manifest:
        return unpack_manifest(self.status_json) if self.status_json else {}

    @property
    def spec(self) -> Manifest:
        return dict(self.manifest.get("spec") or {})
