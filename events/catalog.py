"""The event catalog: one tagged union of immutable msgspec Structs.

Tags are explicit and stable: a stored event is never rewritten, so a tag, once used, keeps
its meaning forever. A changed schema gets a new tag (``Name/v2``); the old shape moves to
``events.legacy`` and is upcast on read. New optional fields get defaults instead.

Objects (VM, VMI, migration, policy manifests) travel as KubeVirt JSON documents
(``dict``), not as typed Structs: the log keeps every field the user wrote, including the
ones we do not model, and typed views are built on read (``events.manifest``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import msgspec

from events.meta import Meta

Manifest = dict[str, Any]


class Event(
    msgspec.Struct,
    tag_field="type",
    kw_only=True,
    rename="camel",
    omit_defaults=True,
    frozen=True,
):
    """Base of every event. Frozen: a stored event is a fact, never changed in place."""

    meta: Meta


class Resources(msgspec.Struct, frozen=True, rename="camel"):
    cpu_millis: int
    memory_bytes: int


class Taint(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True):
    key: str
    effect: str  # NoSchedule | PreferNoSchedule | NoExecute
    value: str = ""


class StopReason(StrEnum):
    """Why a domain stopped, as the handler saw it (maps to VMI Succeeded/Failed)."""

    SHUTDOWN = "Shutdown"  # guest shut down: Succeeded
    DESTROYED = "Destroyed"  # destroyed on request: Succeeded, Failed if the grace period ran out
    CRASHED = "Crashed"  # Failed
    FAILED = "Failed"  # libvirt/launcher failure: Failed
    MIGRATED = "Migrated"  # source side of a completed migration: VMI keeps running elsewhere


#: KubeVirt's reason for a disk image that cannot be pulled. A launcher whose setup fails
#: says why as "<error kind>: <message>"; a DomainStopped(Failed) whose message has this
#: kind failed to find a containerDisk or kernelBoot image (its VMI's Synchronized
#: condition says ErrImagePull, as KubeVirt's does).
ERR_IMAGE_PULL = "ErrImagePull"
IMAGE_PULL_PREFIX = f"{ERR_IMAGE_PULL}: "
#: KubeVirt's Warning event reasons (VMIWarning) and the Synchronized condition's reason
SYNC_FAILED = "SyncFailed"
GUEST_PANICKED = "GuestPanicked"
SYNC_FAILED_CONDITION = "Synchronizing with the Domain failed."


# ---------------------------------------------------------------- VirtualMachine (api)
class VMCreated(Event, tag="VMCreated", frozen=True):
    manifest: Manifest


class VMUpdated(Event, tag="VMUpdated", frozen=True):
    manifest: Manifest


class VMDeleted(Event, tag="VMDeleted", frozen=True):
    grace_period_seconds: int | None = None


class VMStartRequested(Event, tag="VMStartRequested", frozen=True):
    paused: bool = False


class VMStopRequested(Event, tag="VMStopRequested", frozen=True):
    vmi_uid: str = ""
    grace_period_seconds: int | None = None


class VMRestartRequested(Event, tag="VMRestartRequested", frozen=True):
    vmi_uid: str
    grace_period_seconds: int | None = None


class VMRunStrategyChanged(Event, tag="VMRunStrategyChanged", frozen=True):
    """Always/Once + stop → Halted; Halted + start → Always (KubeVirt rewrites the spec)."""

    run_strategy: str


# --------------------------------------------------------- VirtualMachine (controller)
class VMStartFailed(Event, tag="VMStartFailed", frozen=True):
    """Crash-loop backoff bookkeeping (status.startFailure)."""

    consecutive_fail_count: int
    last_failed_vmi_uid: str
    retry_after: float


class VMStartFailureCleared(Event, tag="VMStartFailureCleared", frozen=True):
    pass


class VMICreateFailed(Event, tag="VMICreateFailed", frozen=True):
    """The VM's VMI was not created: its create was refused (KubeVirt's VM controller
    records FailedCreate with the refusal), for this generation of the VM."""

    generation: int
    message: str


class VMStateChangeRequestsCleared(Event, tag="VMStateChangeRequestsCleared", frozen=True):
    """The controller acted on the pending start/stop requests."""


# ----------------------------------------------------- VirtualMachineInstance (intent)
class VMRevisionRecorded(Event, tag="VMRevisionRecorded", frozen=True):
    """The instance type and preference a VM runs with, resolved once (KubeVirt's
    ControllerRevision): `{"kind", "name", "revisionName", "spec"}` each, or None."""

    instancetype: dict[str, Any] | None = None
    preference: dict[str, Any] | None = None


class VMICreated(Event, tag="VMICreated", frozen=True):
    manifest: Manifest
    owner_vm_uid: str = ""  # empty for a standalone VMI


class VMIDeleteRequested(Event, tag="VMIDeleteRequested", frozen=True):
    grace_period_seconds: int | None = None


class VMIPauseRequested(Event, tag="VMIPauseRequested", frozen=True):
    pass


class VMIUnpauseRequested(Event, tag="VMIUnpauseRequested", frozen=True):
    pass


class VMISoftRebootRequested(Event, tag="VMISoftRebootRequested", frozen=True):
    pass


# ------------------------------------------------- VirtualMachineInstance (controller)
class Attachment(msgspec.Struct, frozen=True, kw_only=True):
    """A pod's address on a secondary network: a `multus` network whose definition is a
    `bridge` with `host-local` IPAM (the scheduler's allocation from its subnet)."""

    network: str  # the VMI's network (spec.networks[].name), its interface's name too
    definition: str  # "namespace/name" of the NetworkAttachmentDefinition
    address: str  # "" when the subnet had none free
    subnet: str  # "10.200.0.0/24"
    gateway: str  # the bridge's own address


class PodScheduled(Event, tag="PodScheduled", frozen=True):
    """The scheduler placed the VMI's launcher pod; carries the spec so the handler needs
    nothing but its own node's events."""

    node: str
    pod_name: str
    pod_uid: str
    manifest: Manifest
    #: the pod's address on its node's pod network (the scheduler's allocation from the
    #: node's pod CIDR; "" when the node has none): the VMI keeps it, across migrations too
    pod_address: str = ""
    #: its addresses on secondary networks, allocated as the pod network's; kept too
    attachments: tuple[Attachment, ...] = ()


class Unschedulable(Event, tag="Unschedulable", frozen=True):
    reason: str  # e.g. "Unschedulable"
    message: str


class VMIFailed(Event, tag="VMIFailed", frozen=True):
    reason: str  # e.g. NodeUnresponsive, PodGone
    message: str = ""


class VMIRemoved(Event, tag="VMIRemoved", frozen=True):
    """The VMI object is gone (deleted and its launcher cleaned up)."""


class VMIEvictionBlocked(Event, tag="VMIEvictionBlocked", frozen=True):
    """A drain cannot move this VMI (eviction strategy LiveMigrate, not live-migratable);
    it stays where it is and keeps the node from emptying."""

    node: str
    reason: str
    message: str


# ---------------------------------------------------- VirtualMachineInstance (handler)
class LauncherStarted(Event, tag="LauncherStarted", frozen=True):
    node: str
    pod_uid: str
    pid: int


class DomainStarted(Event, tag="DomainStarted", frozen=True):
    node: str
    domain: str
    paused: bool = False
    qemu_pid: int = 0
    #: libvirt's domain type: "qemu" is software emulation (TCG), "kvm", "test"; "" = unknown
    domain_type: str = ""


class DomainMigratedIn(Event, tag="DomainMigratedIn", frozen=True):
    """The target's domain runs after a live migration (appended once by the target handler
    after MigrationSucceeded): the VMI's QEMU pid and domain type are now the target's. Not
    a DomainStarted: the VMI is Running throughout, and no phase changes."""

    node: str
    qemu_pid: int = 0
    domain_type: str = ""


class DomainPaused(Event, tag="DomainPaused", frozen=True):
    #: KubeVirt's: PausedByUser, PausedIOError; else libvirt's state reason (Unknown, ...)
    reason: str = "PausedByUser"


class DomainResumed(Event, tag="DomainResumed", frozen=True):
    pass


class DomainSoftRebooted(Event, tag="DomainSoftRebooted", frozen=True):
    pass


class DomainStopped(Event, tag="DomainStopped", frozen=True):
    reason: StopReason
    grace_period_expired: bool = False
    message: str = ""


class VMIVolumeAdded(Event, tag="VMIVolumeAdded", frozen=True):
    """addvolume: the VMI's spec gains a hotpluggable volume and its disk (KubeVirt's
    virt-api patches the VMI's spec); routed to the VMI's node, whose handler attaches it."""

    volume: Manifest
    disk: Manifest


class VMIVolumeRemoved(Event, tag="VMIVolumeRemoved", frozen=True):
    """removevolume: the hotplugged volume and its disk leave the VMI's spec."""

    name: str


class VolumeAttached(Event, tag="VolumeAttached", frozen=True):
    """The handler: the hotplugged volume is attached to the running domain as `target`."""

    name: str
    target: str


class VolumeDetached(Event, tag="VolumeDetached", frozen=True):
    name: str


class GuestAgentChanged(Event, tag="GuestAgentChanged", frozen=True):
    """The handler: the guest agent connected to its channel (KubeVirt's AgentConnected
    condition), or went away."""

    connected: bool


class InterfaceStatus(msgspec.Struct, frozen=True, kw_only=True):
    """One of the VMI's interfaces as the guest sees it (KubeVirt's status.interfaces[])."""

    name: str  # the VMI's interface
    mac: str
    interface_name: str = ""  # the guest's name for the NIC (eth0)
    ip_addresses: tuple[str, ...] = ()


class GuestInterfacesChanged(Event, tag="GuestInterfacesChanged", frozen=True):
    """The handler: the guest's NICs and their addresses changed, as its agent reports them."""

    interfaces: tuple[InterfaceStatus, ...] = ()


class VMIWarning(Event, tag="VMIWarning", frozen=True):
    """What KubeVirt records as a Warning event on the VMI (virt-handler's and
    virt-launcher's recorder): GuestPanicked, SyncFailed (a command the domain kept
    refusing, given up; a domain destroyed as irrecoverable), Stopped (a crash)."""

    reason: str
    message: str


class LauncherExited(Event, tag="LauncherExited", frozen=True):
    node: str
    pod_uid: str
    exit_code: int | None = None


# ------------------------------------------------------------- Migration (api / user)
class MigrationRequested(Event, tag="MigrationRequested", frozen=True):
    manifest: Manifest  # the VirtualMachineInstanceMigration


class MigrationAbortRequested(Event, tag="MigrationAbortRequested", frozen=True):
    """Deleting an active migration object cancels it."""


# -------------------------------------------------------------- Migration (controller)
class MigrationSettings(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True):
    """Effective settings: cluster defaults overridden by the winning MigrationPolicy."""

    policy: str = ""
    bandwidth_bytes_per_second: int = 0  # 0 = unlimited
    completion_timeout_per_gib: int = 150
    progress_timeout: int = 150
    allow_auto_converge: bool = False
    allow_post_copy: bool = False
    allow_workload_disruption: bool = False


class MigrationPending(Event, tag="MigrationPending", frozen=True):
    """Accepted by the controller but held back by the parallel limits."""

    vmi_name: str
    message: str = ""


class MigrationScheduling(Event, tag="MigrationScheduling", frozen=True):
    vmi_uid: str
    source_node: str
    source_pod: str


class MigrationScheduled(Event, tag="MigrationScheduled", frozen=True):
    """Handoff: the target pod is placed. Routed to the target node (meta.node)."""

    vmi_name: str
    vmi_uid: str
    source_node: str
    source_pod: str
    target_node: str
    target_pod: str
    target_pod_uid: str
    settings: MigrationSettings
    manifest: Manifest  # the VMI, so the target handler needs only its own traffic


class MigrationFailed(Event, tag="MigrationFailed", frozen=True):
    reason: str
    message: str = ""


# ----------------------------------------------------------------- Migration (handler)
class TargetPreparing(Event, tag="TargetPreparing", frozen=True):
    """The target handler is starting the target launcher."""

    target_node: str


class TargetPrepared(Event, tag="TargetPrepared", frozen=True):
    """Target launcher is up and waiting; routed to the source node."""

    target_node: str
    target_address: str
    target_pod_uid: str


class MigrationStarted(Event, tag="MigrationStarted", frozen=True):
    mode: str = "PreCopy"


class MigrationProgressed(Event, tag="MigrationProgressed", frozen=True):
    data_processed_bytes: int
    data_remaining_bytes: int
    data_total_bytes: int


class MigrationSucceeded(Event, tag="MigrationSucceeded", frozen=True):
    target_node: str
    target_pod_uid: str


class MigrationAborted(Event, tag="MigrationAborted", frozen=True):
    """The source aborted the transfer (cancel or timeout); the VM stays on the source."""

    reason: str = ""


# ------------------------------------------------------------------------------ Node
#: the Kubernetes version the api serves (`/version`) and every node reports as its agent's
KUBERNETES_VERSION = "v1.33.0-virtstream"


class NodeSystemInfo(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """What a node reports of its system: Kubernetes' `status.nodeInfo`, which `kubectl
    get nodes` shows (VERSION; with -o wide OS-IMAGE, KERNEL-VERSION, CONTAINER-RUNTIME)."""

    machine_id: str = ""  # the host's /etc/machine-id
    system_uuid: str = ""  # the node's: derived from the machine and the node's name
    boot_id: str = ""  # the host's boot id: changes with a reboot
    kubelet_version: str = ""  # the node agent's (virt-handler's) Kubernetes version
    os_image: str = ""  # /etc/os-release's PRETTY_NAME
    kernel_version: str = ""
    container_runtime_version: str = ""  # what runs the guests: `libvirt://<version>`
    architecture: str = ""
    operating_system: str = ""


class NodeJoined(Event, tag="NodeJoined/v3", frozen=True):
    node: str
    capacity: Resources
    labels: dict[str, str] = {}
    taints: tuple[Taint, ...] = ()
    address: str = ""
    hypervisor: str = "test"
    #: the handler's console server (serial console, VNC, screenshots) at `address`; 0: none
    console_port: int = 0
    info: NodeSystemInfo = msgspec.field(default_factory=NodeSystemInfo)
    #: the node's subnet of the cluster's pod network (Kubernetes' node.spec.podCIDR);
    #: "": the node's guests have QEMU's user-mode networking only
    pod_cidr: str = ""
    #: why a qemu node has no pod network (the host could not make one)
    pod_network_message: str = ""


class NodeCordoned(Event, tag="NodeCordoned", frozen=True):
    pass


class NodeUncordoned(Event, tag="NodeUncordoned", frozen=True):
    pass


class NodeDrainRequested(Event, tag="NodeDrainRequested", frozen=True):
    pass


class NodeTaintsChanged(Event, tag="NodeTaintsChanged", frozen=True):
    taints: tuple[Taint, ...] = ()


class NodeMetadataChanged(Event, tag="NodeMetadataChanged", frozen=True):
    """A user wrote a node's labels or annotations (`kubectl label|annotate node`): the
    whole sets as written; the server's own annotations are not among them."""

    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class NodeUnresponsive(Event, tag="NodeUnresponsive", frozen=True):
    last_heartbeat: float
    message: str = "virt-handler is not responsive, marking node as unresponsive"


class NodeResponsive(Event, tag="NodeResponsive", frozen=True):
    last_heartbeat: float


class NodeDeleted(Event, tag="NodeDeleted", frozen=True):
    """The Node object is gone (`kubectl delete node`): a handler that starts again for
    it joins anew."""


# -------------------------------------------------------------------- MigrationPolicy
class PolicyCreated(Event, tag="PolicyCreated", frozen=True):
    manifest: Manifest


class PolicyUpdated(Event, tag="PolicyUpdated", frozen=True):
    manifest: Manifest


class PolicyDeleted(Event, tag="PolicyDeleted", frozen=True):
    pass


# ------------------------ the generic kinds (every kind not in events.meta.Kind)
class ResourceCreated(Event, tag="ResourceCreated", frozen=True):
    manifest: Manifest


class ResourceUpdated(Event, tag="ResourceUpdated", frozen=True):
    """The user's spec changed (an update, a patch, the scale subresource)."""

    manifest: Manifest


class ResourceStatusChanged(Event, tag="ResourceStatusChanged", frozen=True):
    """A controller's observation of the object: its whole `status`."""

    status: dict[str, Any]


class ResourceDeleted(Event, tag="ResourceDeleted", frozen=True):
    pass


class VolumeCopy(msgspec.Struct, frozen=True, rename="camel"):
    """One persistent volume's copy: the claim's disk file and its backup."""

    volume: str  # the VM's volume name
    claim: str  # the PVC (persistentVolumeClaim.claimName, dataVolume.name)
    backup: str  # the backup's name (KubeVirt's volumeSnapshotName)


class VolumesCopyRequested(Event, tag="VolumesCopyRequested", frozen=True):
    """The snapshot controller asks a node's handler to copy persistent volumes (claims →
    backups on a VirtualMachineSnapshotContent, backups → claims on a
    VirtualMachineRestore). Routed to the node (meta.node)."""

    copies: tuple[VolumeCopy, ...]
    restore: bool = False
    vmi: str = ""  # "ns/name" of the running VMI to pause for the copy ("": offline)


class VolumesCopied(Event, tag="VolumesCopied", frozen=True):
    """The handler's answer: every copy done, or `error` (nothing is half-done: a copy
    goes to a temporary file renamed when complete). Routed to the same node."""

    copies: tuple[VolumeCopy, ...]
    restore: bool = False
    error: str = ""


class ImportRequested(Event, tag="ImportRequested", frozen=True):
    """The DataVolume controller asks a node's handler to fill the DataVolume's claim
    (CDI's importer pod): from `source` (the DataVolume's `spec.source`: http, blank,
    pvc, registry) into the claim's disk, of `size`. Routed to the node (meta.node)."""

    claim: str
    source: dict[str, Any]
    size: str


class ImportProgressed(Event, tag="ImportProgressed", frozen=True):
    """The importer's progress ("45.20%"), reported at each tenth of the way, not per
    chunk. Routed to the node that imports."""

    progress: str


class ImportFinished(Event, tag="ImportFinished", frozen=True):
    """The import's end: the claim holds the image, or `error` (the claim's disk is only
    replaced by a complete one)."""

    error: str = ""


class UploadReady(Event, tag="UploadReady", frozen=True):
    """The handler of the node an upload DataVolume's claim is on has its
    `ImportRequested` (source `upload`) and waits for the image (CDI's upload server pod
    ready). Routed to that node, which is the one the api hands the bytes to."""


class UploadReceived(Event, tag="UploadReceived", frozen=True):
    """The upload proxy (the api) holds an upload's image whole: `file`, of `size`
    bytes, staged under the claims' disk directory (`uploads/<namespace>/<file>`), for
    the handler to convert into the claim's disk. Routed to the node that said
    `UploadReady`."""

    file: str
    size: int


class VolumeReclaimRequested(Event, tag="VolumeReclaimRequested", frozen=True):
    """A deleted claim's PersistentVolume of reclaim policy Delete: its node's handler is
    asked to delete the claim's disk, as Kubernetes' volume deleter deletes the asset
    before the PV object. On the PV's aggregate, routed to the node (meta.node)."""

    namespace: str
    claim: str


class VolumeReclaimed(Event, tag="VolumeReclaimed", frozen=True):
    """The reclaimed volume's disk is gone (deleted, or never made), or `error`."""

    error: str = ""


# ------------------------------------------------------------------ every kind's metadata
#: the metadata a user changes without touching spec or status (the rest is the server's)
USER_METADATA = ("labels", "annotations", "finalizers", "ownerReferences", "managedFields")


class MetadataChanged(Event, tag="MetadataChanged", frozen=True):
    """Only the object's own metadata changed (a label, an annotation, a finalizer, an
    owner reference): `metadata` holds the `USER_METADATA` fields as they are now (an
    absent one was removed). Spec, status and generation stay; any kind's aggregate.
    `deletion`: the object's deletion begins (`metadata.deletionTimestamp`, the event's
    time); it stays until its finalizers are gone, then its kind's deletion follows."""

    metadata: dict[str, Any]
    deletion: bool = False


# One union per aggregate kind: a fold matches over its kind's union and ends in
# `assert_never`, so mypy reports an event type it does not handle.
VMEvent = (
    VMCreated
    | VMUpdated
    | VMDeleted
    | VMStartRequested
    | VMStopRequested
    | VMRestartRequested
    | VMRunStrategyChanged
    | VMStartFailed
    | VMStartFailureCleared
    | VMICreateFailed
    | VMStateChangeRequestsCleared
    | VMRevisionRecorded
    | MetadataChanged
)
VMIEvent = (
    VMICreated
    | VMIDeleteRequested
    | VMIPauseRequested
    | VMIUnpauseRequested
    | VMISoftRebootRequested
    | PodScheduled
    | Unschedulable
    | VMIFailed
    | VMIRemoved
    | VMIEvictionBlocked
    | LauncherStarted
    | DomainStarted
    | DomainMigratedIn
    | DomainPaused
    | DomainResumed
    | DomainSoftRebooted
    | DomainStopped
    | VMIWarning
    | VMIVolumeAdded
    | VMIVolumeRemoved
    | VolumeAttached
    | VolumeDetached
    | GuestAgentChanged
    | GuestInterfacesChanged
    | LauncherExited
    | MetadataChanged
)
MigrationEvent = (
    MigrationRequested
    | MigrationAbortRequested
    | MigrationPending
    | MigrationScheduling
    | MigrationScheduled
    | MigrationFailed
    | TargetPreparing
    | TargetPrepared
    | MigrationStarted
    | MigrationProgressed
    | MigrationSucceeded
    | MigrationAborted
    | MetadataChanged
)
NodeEvent = (
    NodeJoined
    | NodeCordoned
    | NodeUncordoned
    | NodeDrainRequested
    | NodeTaintsChanged
    | NodeMetadataChanged
    | NodeUnresponsive
    | NodeResponsive
    | NodeDeleted
)
PolicyEvent = PolicyCreated | PolicyUpdated | PolicyDeleted | MetadataChanged
ResourceEvent = (
    ResourceCreated
    | ResourceUpdated
    | ResourceStatusChanged
    | ResourceDeleted
    | VolumesCopyRequested
    | VolumesCopied
    | ImportRequested
    | ImportProgressed
    | ImportFinished
    | UploadReady
    | UploadReceived
    | VolumeReclaimRequested
    | VolumeReclaimed
    | MetadataChanged
)

AnyEvent = VMEvent | VMIEvent | MigrationEvent | NodeEvent | PolicyEvent | ResourceEvent
