"""KubeVirt / Kubernetes API objects as msgspec Structs in KubeVirt's JSON shape.

Every field defaults to None (or is omitted) so that encoding emits exactly what was given:
an explicit `readonly: false` or `resources: {}` survives a round trip. Quantities stay
strings (see events.quantity). Fields we do not model are kept by events.manifest.dump,
which overlays the typed view onto the raw document.
"""

from __future__ import annotations

from typing import Any

import msgspec

Quantity = str | int
JSONDict = dict[str, Any]


def _always(value: str) -> Any:
    """A default that is still emitted: omit_defaults skips plain defaults, and apiVersion,
    kind and Status.status must always be on the wire."""
    return msgspec.field(default_factory=lambda: value)


class KubeObject(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    """Base: camelCase JSON names, omit unset fields, keyword-only construction."""


# ---------------------------------------------------------------- metadata


class OwnerReference(KubeObject):
    api_version: str | None = None
    kind: str | None = None
    name: str | None = None
    uid: str | None = None
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(KubeObject):
    name: str | None = None
    namespace: str | None = None
    generate_name: str | None = None
    uid: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    deletion_grace_period_seconds: int | None = None
    owner_references: list[OwnerReference] | None = None
    managed_fields: list[dict[str, Any]] | None = None  # server-set (field ownership)
    finalizers: list[str] | None = None


class Condition(KubeObject):
    type: str
    status: str
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None
    last_probe_time: str | None = None


# ---------------------------------------------------------------- scheduling


class LabelSelectorRequirement(KubeObject):
    key: str
    operator: str
    values: list[str] | None = None


class LabelSelector(KubeObject):
    match_labels: dict[str, str] | None = None
    match_expressions: list[LabelSelectorRequirement] | None = None


class NodeSelectorRequirement(KubeObject):
    key: str
    operator: str
    values: list[str] | None = None


class NodeSelectorTerm(KubeObject):
    match_expressions: list[NodeSelectorRequirement] | None = None
    match_fields: list[NodeSelectorRequirement] | None = None


class NodeSelector(KubeObject):
    node_selector_terms: list[NodeSelectorTerm] | None = None


class NodeAffinity(KubeObject):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: list[JSONDict] | None = None


class PodAffinityTerm(KubeObject):
    label_selector: LabelSelector | None = None
    topology_key: str | None = None
    namespaces: list[str] | None = None
    namespace_selector: LabelSelector | None = None


class PodAffinity(KubeObject):
    """Used for both podAffinity and podAntiAffinity (same shape)."""

    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] | None = None
    preferred_during_scheduling_ignored_during_execution: list[JSONDict] | None = None


class Affinity(KubeObject):
    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None


class Toleration(KubeObject):
    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None
    toleration_seconds: int | None = None


# ---------------------------------------------------------------- domain


class ResourceRequirements(KubeObject):
    requests: dict[str, Quantity] | None = None
    limits: dict[str, Quantity] | None = None
    overcommit_guest_overhead: bool | None = None


class CPU(KubeObject):
    cores: int | None = None
    sockets: int | None = None
    threads: int | None = None
    model: str | None = None
    dedicated_cpu_placement: bool | None = None
    max_sockets: int | None = None
    features: list[JSONDict] | None = None
    numa: JSONDict | None = None
    isolate_emulator_thread: bool | None = None
    realtime: JSONDict | None = None


class Hugepages(KubeObject):
    page_size: str | None = None


class Memory(KubeObject):
    guest: Quantity | None = None
    hugepages: Hugepages | None = None
    max_guest: Quantity | None = None
    reserved_overhead: JSONDict | None = None


class Machine(KubeObject):
    type: str | None = None


class Bootloader(KubeObject):
    bios: JSONDict | None = None
    efi: JSONDict | None = None


class Firmware(KubeObject):
    uuid: str | None = None
    serial: str | None = None
    bootloader: Bootloader | None = None
    kernel_boot: JSONDict | None = None
    acpi: JSONDict | None = None


class DiskTarget(KubeObject):
    bus: str | None = None
    readonly: bool | None = None
    pci_address: str | None = None


class Disk(KubeObject):
    name: str
    disk: DiskTarget | None = None
    cdrom: DiskTarget | None = None
    lun: DiskTarget | None = None
    boot_order: int | None = None
    serial: str | None = None
    cache: str | None = None
    io: str | None = None
    dedicated_io_thread: bool | None = msgspec.field(default=None, name="dedicatedIOThread")
    tag: str | None = None
    block_size: JSONDict | None = None
    shareable: bool | None = None
    error_policy: str | None = None
    changed_block_tracking: bool | None = None


class Port(KubeObject):
    port: int
    name: str | None = None
    protocol: str | None = None


class Interface(KubeObject):
    name: str
    model: str | None = None
    mac_address: str | None = None
    bridge: JSONDict | None = None
    masquerade: JSONDict | None = None
    sriov: JSONDict | None = None
    slirp: JSONDict | None = None
    passt: JSONDict | None = None
    binding: JSONDict | None = None
    ports: list[Port] | None = None
    boot_order: int | None = None
    pci_address: str | None = None
    macvtap: JSONDict | None = None
    passt_binding: JSONDict | None = None
    port_ranges: list[JSONDict] | None = None
    dhcp_options: JSONDict | None = None
    tag: str | None = None
    acpi_index: int | None = None
    state: str | None = None


class Input(KubeObject):
    # KubeVirt's scheme defaults an empty bus to usb and an empty type to tablet.
    name: str | None = None
    type: str | None = None
    bus: str | None = None


class SoundDevice(KubeObject):
    name: str | None = None
    model: str | None = None


class DiskIOThreads(KubeObject):
    supplemental_pool_thread_count: int | None = None


class PodDNSConfigOption(KubeObject):
    name: str | None = None
    value: str | None = None


class PodDNSConfig(KubeObject):
    nameservers: list[str] | None = None
    searches: list[str] | None = None
    options: list[PodDNSConfigOption] | None = None


class Devices(KubeObject):
    disks: list[Disk] | None = None
    interfaces: list[Interface] | None = None
    rng: JSONDict | None = None
    autoattach_pod_interface: bool | None = None
    autoattach_graphics_device: bool | None = None
    autoattach_serial_console: bool | None = None
    autoattach_mem_balloon: bool | None = None
    network_interface_multiqueue: bool | None = None
    inputs: list[Input] | None = None
    sound: SoundDevice | None = None
    use_virtio_transitional: bool | None = None
    disable_hotplug: bool | None = None
    watchdog: JSONDict | None = None
    log_serial_console: bool | None = None
    autoattach_input_device: bool | None = None
    autoattach_vsock: bool | None = msgspec.field(default=None, name="autoattachVSOCK")
    block_multi_queue: bool | None = None
    gpus: list[JSONDict] | None = None
    downward_metrics: JSONDict | None = None
    panic_devices: list[JSONDict] | None = None
    filesystems: list[JSONDict] | None = None
    host_devices: list[JSONDict] | None = None
    client_passthrough: JSONDict | None = None
    tpm: JSONDict | None = None
    video: JSONDict | None = None


class DomainSpec(KubeObject):
    resources: ResourceRequirements | None = None
    cpu: CPU | None = None
    memory: Memory | None = None
    machine: Machine | None = None
    firmware: Firmware | None = None
    devices: Devices | None = None
    features: JSONDict | None = None
    clock: JSONDict | None = None
    io_threads_policy: str | None = None
    io_threads: DiskIOThreads | None = None
    chassis: JSONDict | None = None
    launch_security: JSONDict | None = None
    reboot_policy: str | None = None


# ---------------------------------------------------------------- volumes / networks


class ContainerDiskSource(KubeObject):
    image: str
    image_pull_policy: str | None = None
    image_pull_secret: str | None = None
    path: str | None = None


class CloudInitSource(KubeObject):
    """cloudInitNoCloud and cloudInitConfigDrive share this shape."""

    user_data: str | None = None
    user_data_base64: str | None = None
    user_data_secret_ref: JSONDict | None = msgspec.field(default=None, name="secretRef")
    network_data: str | None = None
    network_data_base64: str | None = None
    network_data_secret_ref: JSONDict | None = None


class PVCSource(KubeObject):
    claim_name: str
    read_only: bool | None = None
    hotpluggable: bool | None = None


class DataVolumeSource(KubeObject):
    name: str
    hotpluggable: bool | None = None


class EmptyDiskSource(KubeObject):
    capacity: Quantity


class EphemeralSource(KubeObject):
    persistent_volume_claim: PVCSource | None = None


class Volume(KubeObject):
    name: str
    container_disk: ContainerDiskSource | None = None
    cloud_init_no_cloud: CloudInitSource | None = None
    cloud_init_config_drive: CloudInitSource | None = None
    persistent_volume_claim: PVCSource | None = None
    data_volume: DataVolumeSource | None = None
    empty_disk: EmptyDiskSource | None = None
    ephemeral: EphemeralSource | None = None
    host_disk: JSONDict | None = None
    config_map: JSONDict | None = None
    secret: JSONDict | None = None
    service_account: JSONDict | None = None
    downward_api: JSONDict | None = msgspec.field(default=None, name="downwardAPI")
    downward_metrics: JSONDict | None = None
    sysprep: JSONDict | None = None
    memory_dump: JSONDict | None = None
    container_path: JSONDict | None = None

    # One name per source so that admission can count them ("exactly one source").
    SOURCES = (
        "container_disk", "cloud_init_no_cloud", "cloud_init_config_drive",
        "persistent_volume_claim", "data_volume", "empty_disk", "ephemeral", "host_disk",
        "config_map", "secret", "service_account", "downward_api", "downward_metrics",
        "sysprep", "memory_dump",
    )  # fmt: skip


class PodNetwork(KubeObject):
    vm_network_cidr: str | None = msgspec.field(default=None, name="vmNetworkCIDR")
    vm_i_pv6_network_cidr: str | None = msgspec.field(default=None, name="vmIPv6NetworkCIDR")


class MultusNetwork(KubeObject):
    network_name: str | None = None
    default: bool | None = None


class Network(KubeObject):
    name: str
    pod: PodNetwork | None = None
    multus: MultusNetwork | None = None
    resource_claim: JSONDict | None = None


# ---------------------------------------------------------------- VMI


class VirtualMachineInstanceSpec(KubeObject):
    domain: DomainSpec = msgspec.field(default_factory=DomainSpec)
    volumes: list[Volume] | None = None
    networks: list[Network] | None = None
    node_selector: dict[str, str] | None = None
    affinity: Affinity | None = None
    tolerations: list[Toleration] | None = None
    eviction_strategy: str | None = None
    termination_grace_period_seconds: int | None = None
    hostname: str | None = None
    subdomain: str | None = None
    priority_class_name: str | None = None
    scheduler_name: str | None = None
    start_strategy: str | None = None
    architecture: str | None = None
    service_account_name: str | None = None
    topology_spread_constraints: list[JSONDict] | None = None
    liveness_probe: JSONDict | None = None
    readiness_probe: JSONDict | None = None
    dns_policy: str | None = None
    dns_config: PodDNSConfig | None = None
    access_credentials: list[JSONDict] | None = None
    resource_claims: list[JSONDict] | None = None
    utility_volumes: list[JSONDict] | None = None


class PhaseTransitionTimestamp(KubeObject):
    phase: str
    phase_transition_timestamp: str


class VMIInterfaceStatus(KubeObject):
    name: str | None = None
    ip_address: str | None = None
    ip_addresses: list[str] | None = None
    mac: str | None = None
    interface_name: str | None = None
    info_source: str | None = None


class MigrationState(KubeObject):
    migration_uid: str | None = None
    source_node: str | None = None
    target_node: str | None = None
    source_pod: str | None = None
    target_pod: str | None = None
    target_node_address: str | None = None
    target_node_domain_detected: bool | None = None
    start_timestamp: str | None = None
    end_timestamp: str | None = None
    completed: bool | None = None
    failed: bool | None = None
    failure_reason: str | None = None
    abort_requested: bool | None = None
    abort_status: str | None = None
    mode: str | None = None
    migration_policy_name: str | None = None
    migration_configuration: JSONDict | None = None


class VirtualMachineInstanceStatus(KubeObject):
    phase: str | None = None
    reason: str | None = None
    node_name: str | None = None
    conditions: list[Condition] | None = None
    phase_transition_timestamps: list[PhaseTransitionTimestamp] | None = None
    interfaces: list[VMIInterfaceStatus] | None = None
    guest_os_info: JSONDict | None = msgspec.field(default=None, name="guestOSInfo")
    migration_state: MigrationState | None = None
    migration_method: str | None = None
    migration_transport: str | None = None
    active_pods: dict[str, str] | None = None
    evacuation_node_name: str | None = None
    qos_class: str | None = None
    launcher_container_image_version: str | None = None


class VirtualMachineInstance(KubeObject):
    api_version: str = _always("kubevirt.io/v1")
    kind: str = _always("VirtualMachineInstance")
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: VirtualMachineInstanceSpec = msgspec.field(default_factory=VirtualMachineInstanceSpec)
    status: VirtualMachineInstanceStatus | None = None


# ---------------------------------------------------------------- VM


class VMITemplateSpec(KubeObject):
    metadata: ObjectMeta | None = None
    spec: VirtualMachineInstanceSpec = msgspec.field(default_factory=VirtualMachineInstanceSpec)


class VirtualMachineSpec(KubeObject):
    running: bool | None = None
    run_strategy: str | None = None
    template: VMITemplateSpec = msgspec.field(default_factory=VMITemplateSpec)
    data_volume_templates: list[JSONDict] | None = None
    instancetype: JSONDict | None = None
    preference: JSONDict | None = None
    update_volumes_strategy: str | None = None


class StateChangeRequest(KubeObject):
    action: str
    uid: str | None = None
    data: dict[str, str] | None = None


class StartFailure(KubeObject):
    consecutive_fail_count: int | None = None
    last_failed_vmi_uid: str | None = msgspec.field(default=None, name="lastFailedVMIUID")
    retry_after_timestamp: str | None = None


class VirtualMachineStatus(KubeObject):
    printable_status: str | None = None
    ready: bool | None = None
    created: bool | None = None
    conditions: list[Condition] | None = None
    state_change_requests: list[StateChangeRequest] | None = None
    start_failure: StartFailure | None = None
    run_strategy: str | None = None
    desired_generation: int | None = None
    observed_generation: int | None = None


class VirtualMachine(KubeObject):
    api_version: str = _always("kubevirt.io/v1")
    kind: str = _always("VirtualMachine")
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: VirtualMachineSpec = msgspec.field(default_factory=VirtualMachineSpec)
    status: VirtualMachineStatus | None = None


# ---------------------------------------------------------------- migration


class VirtualMachineInstanceMigrationSpec(KubeObject):
    vmi_name: str | None = msgspec.field(default=None, name="vmiName")
    added_node_selector: dict[str, str] | None = None
    send_to: JSONDict | None = None
    receive: JSONDict | None = None
    priority: str | None = None


class VirtualMachineInstanceMigrationStatus(KubeObject):
    phase: str | None = None
    phase_transition_timestamps: list[PhaseTransitionTimestamp] | None = None
    migration_state: MigrationState | None = None
    conditions: list[Condition] | None = None


class VirtualMachineInstanceMigration(KubeObject):
    api_version: str = _always("kubevirt.io/v1")
    kind: str = _always("VirtualMachineInstanceMigration")
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: VirtualMachineInstanceMigrationSpec = msgspec.field(
        default_factory=VirtualMachineInstanceMigrationSpec
    )
    status: VirtualMachineInstanceMigrationStatus | None = None


class MigrationPolicySelectors(KubeObject):
    # Plain label maps in KubeVirt's API (not LabelSelector objects).
    namespace_selector: dict[str, str] | None = None
    virtual_machine_instance_selector: dict[str, str] | None = None


class MigrationPolicySpec(KubeObject):
    selectors: MigrationPolicySelectors | None = None
    allow_auto_converge: bool | None = None
    bandwidth_per_migration: Quantity | None = None
    completion_timeout_per_gib: int | None = msgspec.field(
        default=None, name="completionTimeoutPerGiB"
    )
    allow_post_copy: bool | None = None
    allow_workload_disruption: bool | None = None


class MigrationPolicy(KubeObject):
    api_version: str = _always("migrations.kubevirt.io/v1alpha1")
    kind: str = _always("MigrationPolicy")
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: MigrationPolicySpec = msgspec.field(default_factory=MigrationPolicySpec)
    status: JSONDict | None = None


# ------------------------------------------- instance types, sets, pools, snapshots
# Typed only as far as the api needs (metadata for names, labels and owners); their specs
# are read as plain JSON by the modules that own them (kinds/*.py, the controller).


class SpecObject(KubeObject):
    api_version: str | None = None
    kind: str | None = None
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: JSONDict = msgspec.field(default_factory=dict)
    status: JSONDict | None = None


class VirtualMachineInstancetype(SpecObject):
    api_version: str = _always("instancetype.kubevirt.io/v1beta1")
    kind: str = _always("VirtualMachineInstancetype")


class VirtualMachineClusterInstancetype(SpecObject):
    api_version: str = _always("instancetype.kubevirt.io/v1beta1")
    kind: str = _always("VirtualMachineClusterInstancetype")


class VirtualMachinePreference(SpecObject):
    api_version: str = _always("instancetype.kubevirt.io/v1beta1")
    kind: str = _always("VirtualMachinePreference")


class VirtualMachineClusterPreference(SpecObject):
    api_version: str = _always("instancetype.kubevirt.io/v1beta1")
    kind: str = _always("VirtualMachineClusterPreference")


class VirtualMachineInstanceReplicaSet(SpecObject):
    api_version: str = _always("kubevirt.io/v1")
    kind: str = _always("VirtualMachineInstanceReplicaSet")


class VirtualMachineInstancePreset(SpecObject):
    api_version: str = _always("kubevirt.io/v1alpha3")
    kind: str = _always("VirtualMachineInstancePreset")


class VirtualMachinePool(SpecObject):
    api_version: str = _always("pool.kubevirt.io/v1beta1")
    kind: str = _always("VirtualMachinePool")


class VirtualMachineSnapshot(SpecObject):
    api_version: str = _always("snapshot.kubevirt.io/v1beta1")
    kind: str = _always("VirtualMachineSnapshot")


class VirtualMachineSnapshotContent(SpecObject):
    api_version: str = _always("snapshot.kubevirt.io/v1beta1")
    kind: str = _always("VirtualMachineSnapshotContent")


class VirtualMachineRestore(SpecObject):
    api_version: str = _always("snapshot.kubevirt.io/v1beta1")
    kind: str = _always("VirtualMachineRestore")


class VirtualMachineClone(SpecObject):
    api_version: str = _always("clone.kubevirt.io/v1beta1")
    kind: str = _always("VirtualMachineClone")


class VirtualMachineExport(SpecObject):
    api_version: str = _always("export.kubevirt.io/v1beta1")
    kind: str = _always("VirtualMachineExport")


class Secret(KubeObject):
    """core/v1 Secret: `data` base64 by key (`stringData` folded into it on write)."""

    api_version: str = _always("v1")
    kind: str = _always("Secret")
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    data: dict[str, str] | None = None
    string_data: dict[str, str] | None = None
    type: str | None = None
    immutable: bool | None = None


# ---------------------------------------------------------------- storage


class StorageClass(KubeObject):
    """storage.k8s.io/v1 StorageClass: no spec, its fields are top-level."""

    api_version: str = _always("storage.k8s.io/v1")
    kind: str = _always("StorageClass")
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    provisioner: str = ""
    parameters: dict[str, str] | None = None
    reclaim_policy: str | None = None
    volume_binding_mode: str | None = None
    allow_volume_expansion: bool | None = None
    mount_options: list[str] | None = None
    allowed_topologies: list[JSONDict] | None = None


class PersistentVolumeClaim(SpecObject):
    api_version: str = _always("v1")
    kind: str = _always("PersistentVolumeClaim")


class PersistentVolume(SpecObject):
    api_version: str = _always("v1")
    kind: str = _always("PersistentVolume")


class DataVolume(SpecObject):
    api_version: str = _always("cdi.kubevirt.io/v1beta1")
    kind: str = _always("DataVolume")


class DataSource(SpecObject):
    api_version: str = _always("cdi.kubevirt.io/v1beta1")
    kind: str = _always("DataSource")


# ---------------------------------------------------------------- Node


class Taint(KubeObject):
    key: str
    effect: str
    value: str | None = None
    time_added: str | None = None


class NodeSpec(KubeObject):
    unschedulable: bool | None = None
    taints: list[Taint] | None = None


class NodeAddress(KubeObject):
    type: str
    address: str


class NodeStatus(KubeObject):
    capacity: dict[str, Quantity] | None = None
    allocatable: dict[str, Quantity] | None = None
    conditions: list[Condition] | None = None
    addresses: list[NodeAddress] | None = None


class Node(KubeObject):
    api_version: str = _always("v1")
    kind: str = _always("Node")
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NodeSpec | None = None
    status: NodeStatus | None = None


class Namespace(SpecObject):
    """A core/v1 Namespace: `spec.finalizers` and `status.phase` are the server's."""

    api_version: str = _always("v1")
    kind: str = _always("Namespace")


# ---------------------------------------------------------------- Status (errors)


class StatusCause(KubeObject):
    # Kubernetes serialises StatusCause.Type under the JSON key "reason".
    type: str = msgspec.field(default="", name="reason")
    message: str = ""
    field: str = ""


class StatusDetails(KubeObject):
    name: str | None = None
    group: str | None = None
    kind: str | None = None
    uid: str | None = None
    causes: list[StatusCause] | None = None
    retry_after_seconds: int | None = None


class Status(KubeObject):
    api_version: str = _always("v1")
    kind: str = _always("Status")
    metadata: JSONDict = msgspec.field(default_factory=dict)
    status: str = _always("Failure")
    message: str = ""
    reason: str = ""
    details: StatusDetails | None = None
    code: int = 0
