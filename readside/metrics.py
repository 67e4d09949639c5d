"""KubeVirt's metrics, computed from the projections, so users' dashboards and alerts carry over.

Two halves:
- `ProjectionMetrics.collect()` is a Prometheus custom collector: at scrape time it reads the
  current views (VMs, VMIs, migrations, nodes) and yields gauges with KubeVirt's names
  (`kubevirt_vmi_info`, `kubevirt_vmi_phase_count`, `kubevirt_vm_info`,
  `kubevirt_vm_*_status_last_transition_timestamp_seconds`, `kubevirt_vmi_migrations_in_*`,
  `kubevirt_vmi_migration_{succeeded,failed}`, migration data bytes) plus our node gauges.
  Nothing is kept between scrapes, so the numbers are exactly what the api would list.
- `ProjectionMetrics.observe(stored, touched)` runs after each folded event and feeds the
  phase-transition histograms (`kubevirt_vmi_phase_transition_time_from_creation_seconds`,
  `..._from_deletion_seconds`, `kubevirt_vmi_phase_transition_time_seconds`,
  `kubevirt_vmi_migration_phase_transition_time_from_creation_seconds`) from the transition
  timestamps the views record, i.e. from the events' `occurred_at`, like KubeVirt does from
  `status.phaseTransitionTimestamps`.

Phase labels follow KubeVirt: lower case in `kubevirt_vmi_info`/`kubevirt_vmi_phase_count`
(its collectors lower-case them), as written (`Running`) in the histograms."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from events.envelope import Stored
from events.meta import Kind, ResourceKind
from kinds import dataimportcron
from projections import storage
from projections.allocation import node_allocated
from projections.cluster import Cluster, Touched
from projections.render import printable_status
from projections.views import MigrationView, ResourceView, VMIView, VMView

# KubeVirt's PhaseTransitionTimeBuckets (seconds), so histogram_quantile answers compare.
PHASE_TRANSITION_BUCKETS = (
    0.5, 1, 2, 5, 10, 20, 30, 40, 50, 60, 90, 120, 180, 300, 600, 1200, 1800, 3600,
)  # fmt: skip

# KubeVirt's printable status → status group (vmstats_collector.go). Anything else: error.
STATUS_GROUPS = {
    "Provisioning": "starting",
    "Starting": "starting",
    "WaitingForVolumeBinding": "starting",
    "Running": "running",
    "Migrating": "migrating",
    "Stopped": "non_running",
    "Paused": "non_running",
    "Stopping": "non_running",
    "Terminating": "non_running",
}
GROUPS = ("starting", "running", "migrating", "non_running", "error")

# KubeVirt counts Scheduled/PreparingTarget/TargetReady as running migrations.
RUNNING_MIGRATION_PHASES = ("Scheduled", "PreparingTarget", "TargetReady", "Running")

ANNOTATION_PREFIX = "vm.kubevirt.io/"


class PhaseHistograms:
    """The transition-time histograms, in one registry (the process's default, or a test's)."""

    def __init__(self, registry: CollectorRegistry | None = REGISTRY) -> None:
        def hist(name: str, doc: str, labels: list[str]) -> Histogram:
            return Histogram(name, doc, labels, buckets=PHASE_TRANSITION_BUCKETS, registry=registry)

        self.from_creation = hist(
            "kubevirt_vmi_phase_transition_time_from_creation_seconds",
            "Histogram of VM phase transitions duration from creation time in seconds.",
            ["phase"],
        )
        self.from_deletion = hist(
            "kubevirt_vmi_phase_transition_time_from_deletion_seconds",
            "Histogram of VM phase transitions duration from deletion time in seconds.",
            ["phase"],
        )
        self.between = hist(
            "kubevirt_vmi_phase_transition_time_seconds",
            "Histogram of VM phase transitions duration between different phases in seconds.",
            ["phase", "last_phase"],
        )
        self.migration_from_creation = hist(
            "kubevirt_vmi_migration_phase_transition_time_from_creation_seconds",
            "Histogram of VM migration phase transitions duration from creation time in seconds.",
            ["phase"],
        )


_default_histograms: PhaseHistograms | None = None


def default_histograms() -> PhaseHistograms:
    """The process-wide histograms (created on first use: importing registers nothing)."""
    global _default_histograms
    if _default_histograms is None:
        _default_histograms = PhaseHistograms(REGISTRY)
    return _default_histograms


# the ProjectionMetrics currently registered in each registry, so re-registering replaces it
_registered: dict[int, ProjectionMetrics] = {}


class ProjectionMetrics:
    """KubeVirt's metrics over one `Cluster`. Wiring (projection runner):

    self.metrics = ProjectionMetrics(self.cluster).register()
    ...  # per folded event, after `touched = self.cluster.apply(s)`:
    self.metrics.observe(s, touched, replaying=s.seq <= self.caught_up_to)
    """

    def __init__(
        self,
        cluster: Cluster,
        *,
        clock: Callable[[], float] = time.time,
        histograms: PhaseHistograms | None = None,
    ) -> None:
        self.cluster = cluster
        self.clock = clock
        self.histograms = histograms or default_histograms()
        # how many of each object's transitions were already observed: key → (uid, count).
        # A cluster loaded from a checkpoint was observed up to its views: what they hold
        # counts as seen (a view's next transition is the first one to observe), so the
        # bookkeeping is a function of the views and needs no checkpoint of its own.
        self._vmi_seen: dict[str, tuple[str, int]] = {
            k: (v.uid, len(v.transitions)) for k, v in cluster.vmis.items()
        }
        self._mig_seen: dict[str, tuple[str, int]] = {
            k: (m.uid, len(m.transitions)) for k, m in cluster.migrations.items()
        }

    def register(self, registry: CollectorRegistry = REGISTRY) -> ProjectionMetrics:
        """Register as the registry's projection collector, replacing an earlier one (a
        process that builds several runners, as tests do, exports the newest)."""
        previous = _registered.get(id(registry))
        if previous is not None:
            registry.unregister(previous)
        registry.register(self)
        _registered[id(registry)] = self
        return self

    def unregister(self, registry: CollectorRegistry = REGISTRY) -> None:
        if _registered.get(id(registry)) is self:
            registry.unregister(self)
            del _registered[id(registry)]

    # ------------------------------------------------------------ histograms
    def observe(
        self, stored: Stored, touched: Iterable[Touched], *, replaying: bool = False
    ) -> None:
        """Record the phase transitions the folded event made. While `replaying` history
        (catch-up at start) only the bookkeeping advances: old transitions would land in
        one scrape interval and distort every rate() window over it."""
        del stored  # the views carry the transition timestamps
        for kind, key in touched:
            if kind == Kind.VMI:
                self._observe_vmi(key, replaying)
            elif kind == Kind.MIGRATION:
                self._observe_migration(key, replaying)

    def _new_transitions(
        self,
        seen: dict[str, tuple[str, int]],
        key: str,
        view: VMIView | MigrationView | None,
    ) -> tuple[int, tuple[tuple[str, float], ...]]:
        if view is None:
            seen.pop(key, None)
            return 0, ()
        uid, count = seen.get(key, ("", 0))
        if uid != view.uid:
            count = 0  # a new object under a reused name: start over
        seen[key] = (view.uid, len(view.transitions))
        # the first transition is the creation itself (Pending at created_at)
        start = max(count, 1)
        return start, view.transitions[start:]

    def _observe_vmi(self, key: str, replaying: bool) -> None:
        vmi = self.cluster.vmis.get(key)
        start, new = self._new_transitions(self._vmi_seen, key, vmi)
        if vmi is None or replaying:
            return
        h = self.histograms
        for i, (phase, at) in enumerate(new, start):
            h.from_creation.labels(phase).observe(max(0.0, at - vmi.created_at))
            last_phase, last_at = vmi.transitions[i - 1]
            h.between.labels(phase, last_phase).observe(max(0.0, at - last_at))
            deleting = vmi.deletion_requested_at
            if deleting is not None and phase in ("Succeeded", "Failed"):
                h.from_deletion.labels(phase).observe(max(0.0, at - deleting))

    def _observe_migration(self, key: str, replaying: bool) -> None:
        mig = self.cluster.migrations.get(key)
        _, new = self._new_transitions(self._mig_seen, key, mig)
        if mig is None or replaying:
            return
        for phase, at in new:
            self.histograms.migration_from_creation.labels(phase).observe(
                max(0.0, at - mig.created_at)
            )

    # ------------------------------------------------------------- collector
    def describe(self) -> list[Metric]:
        # no up-front description: the families are only known at scrape time
        return []

    def collect(self) -> Iterator[Metric]:
        now = self.clock()
        yield from self._vmi_metrics()
        yield from self._vm_metrics(now)
        yield from self._migration_metrics()
        yield from self._node_metrics()
        yield from self._cdi_metrics()

    def _vmi_metrics(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "kubevirt_vmi_info",
            "Information about VirtualMachineInstances.",
            labels=["node", "namespace", "name", "phase", "os", "workload", "flavor", "vmi_pod"],
        )
        count = GaugeMetricFamily(
            "kubevirt_vmi_phase_count",
            "Sum of VMIs per phase and node.",
            labels=["phase", "node", "os", "workload", "flavor"],
        )
        counts: dict[tuple[str, ...], int] = {}
        for vmi in self.cluster.vmis.values():
            os_, workload, flavor = system_info(vmi.manifest)
            phase = vmi.phase.lower()
            pod = vmi.pod_name if vmi.phase in ("Scheduled", "Running") else ""
            info.add_metric(
                [vmi.node, vmi.namespace, vmi.name, phase, os_, workload, flavor, pod], 1.0
            )
            key = (phase, vmi.node, os_ or "<none>", workload or "<none>", flavor or "<none>")
            counts[key] = counts.get(key, 0) + 1
        for labels, n in sorted(counts.items()):
            count.add_metric(list(labels), n)
        yield info
        yield count

    def _vm_metrics(self, now: float) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "kubevirt_vm_info",
            "Information about Virtual Machines.",
            labels=["namespace", "name", "os", "workload", "flavor", "status", "status_group"],
        )
        number = GaugeMetricFamily(
            "kubevirt_number_of_vms",
            "The number of VMs in the cluster by namespace.",
            labels=["namespace"],
        )
        stamps = {
            g: GaugeMetricFamily(
                f"kubevirt_vm_{g}_status_last_transition_timestamp_seconds",
                f"Virtual Machine last transition timestamp to {g} status.",
                labels=["name", "namespace"],
            )
            for g in GROUPS
        }
        per_ns: dict[str, int] = {}
        for vm in self.cluster.vms.values():
            status = printable_status(self.cluster, vm, now)
            group = STATUS_GROUPS.get(status, "error")
            os_, workload, flavor = system_info(template_meta(vm.manifest))
            info.add_metric([vm.namespace, vm.name, os_, workload, flavor, status, group], 1.0)
            since = self._status_since(vm)
            for g, fam in stamps.items():
                fam.add_metric([vm.name, vm.namespace], since if g == group else 0.0)
            per_ns[vm.namespace] = per_ns.get(vm.namespace, 0) + 1
        for ns, n in sorted(per_ns.items()):
            number.add_metric([ns], n)
        yield info
        yield number
        yield from stamps.values()

    def _status_since(self, vm: VMView) -> float:
        """When the VM's printable status last changed, as near as the views tell: the
        latest of its creation, its deletion, its VMI's creation, phase transitions and
        deletion request, and its active migration's transitions."""
        times = [vm.created_at, vm.deleted_at or 0.0]
        vmi = self.cluster.vmi_of_vm(vm)
        if vmi is not None:
            times += [vmi.created_at, vmi.deletion_requested_at or 0.0]
            times += [at for _, at in vmi.transitions[-1:]]
            mig = self.cluster.active_migration(vmi.namespace, vmi.name)
            if mig is not None:
                times += [at for _, at in mig.transitions[-1:]]
        return max(times)

    def _migration_metrics(self) -> Iterator[Metric]:
        def gauge(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc)

        pending = gauge(
            "kubevirt_vmi_migrations_in_pending_phase", "Number of current pending migrations."
        )
        scheduling = gauge(
            "kubevirt_vmi_migrations_in_scheduling_phase",
            "Number of current scheduling migrations.",
        )
        running = gauge(
            "kubevirt_vmi_migrations_in_running_phase", "Number of current running migrations."
        )
        outcome = ["vmi", "vmim", "namespace"]
        succeeded = GaugeMetricFamily(
            "kubevirt_vmi_migration_succeeded",
            "Indicates if the VMI migration succeeded.",
            labels=outcome,
        )
        failed = GaugeMetricFamily(
            "kubevirt_vmi_migration_failed",
            "Indicates if the VMI migration failed.",
            labels=outcome,
        )
        data = ["name", "namespace", "node"]
        processed = GaugeMetricFamily(
            "kubevirt_vmi_migration_data_processed_bytes",
            "The total Guest OS data processed and migrated to the new VM.",
            labels=data,
        )
        remaining = GaugeMetricFamily(
            "kubevirt_vmi_migration_data_remaining_bytes",
            "The remaining guest OS data to be migrated to the new VM.",
            labels=data,
        )
        total = GaugeMetricFamily(
            "kubevirt_vmi_migration_data_total_bytes",
            "The total Guest OS data to be migrated to the new VM.",
            labels=data,
        )
        n = {"Pending": 0, "Scheduling": 0, "Running": 0}
        for mig in self.cluster.migrations.values():
            if mig.deleted and mig.final:
                continue  # gone for readers, as in Kubernetes
            labels = [mig.vmi_name, mig.name, mig.namespace]
            if mig.phase == "Succeeded":
                succeeded.add_metric(labels, 1.0)
            elif mig.phase == "Failed":
                failed.add_metric(labels, 1.0)
            elif mig.phase in ("Pending", "Scheduling"):
                n[mig.phase] += 1
            else:
                n["Running"] += 1
            if mig.phase == "Running":
                # the source handler reports these while the migration runs
                where = [mig.vmi_name, mig.namespace, mig.source_node]
                processed.add_metric(where, mig.data_processed)
                remaining.add_metric(where, mig.data_remaining)
                total.add_metric(where, mig.data_total)
        pending.add_metric([], n["Pending"])
        scheduling.add_metric([], n["Scheduling"])
        running.add_metric([], n["Running"])
        yield from (pending, scheduling, running, succeeded, failed, processed, remaining, total)

    def _node_metrics(self) -> Iterator[Metric]:
        def gauge(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=["node"])

        cap_cpu = gauge("virtstream_node_capacity_cpu_cores", "CPU cores a node offers")
        cap_mem = gauge("virtstream_node_capacity_memory_bytes", "Memory a node offers")
        alloc_cpu = gauge(
            "virtstream_node_allocated_cpu_cores",
            "CPU requested by the non-final VMIs and incoming migration targets on a node",
        )
        alloc_mem = gauge(
            "virtstream_node_allocated_memory_bytes",
            "Memory (with overhead) requested by the non-final VMIs and migration targets",
        )
        vmis = gauge("virtstream_node_vmis", "Non-final VMIs placed on a node")
        schedulable = gauge(
            "virtstream_node_schedulable", "1 if new VMIs may be placed on the node"
        )
        unresponsive = gauge(
            "virtstream_node_unresponsive", "1 once the controller declared the node unresponsive"
        )
        cordoned = gauge("virtstream_node_cordoned", "1 if the node is cordoned (or draining)")
        for name, node in sorted(self.cluster.nodes.items()):
            cpu, mem, count = node_allocated(self.cluster, name)
            cap_cpu.add_metric([name], node.capacity.cpu_millis / 1000)
            cap_mem.add_metric([name], node.capacity.memory_bytes)
            alloc_cpu.add_metric([name], cpu / 1000)
            alloc_mem.add_metric([name], mem)
            vmis.add_metric([name], count)
            schedulable.add_metric([name], float(node.schedulable))
            unresponsive.add_metric([name], float(node.unresponsive))
            cordoned.add_metric([name], float(node.cordoned))
        yield from (
            cap_cpu,
            cap_mem,
            alloc_cpu,
            alloc_mem,
            vmis,
            schedulable,
            unresponsive,
            cordoned,
        )

    def _cdi_metrics(self) -> Iterator[Metric]:
        """CDI's operator metrics, for the storage this cluster has (its DataVolume
        controller always runs; an import is a handler's job, restarted only with it)."""
        ready = GaugeMetricFamily("kubevirt_cdi_cr_ready", "CDI install ready")
        ready.add_metric([], 1.0)
        pending = GaugeMetricFamily(
            "kubevirt_cdi_datavolume_pending",
            "Number of DataVolumes pending for default storage class to be configured",
        )
        default = storage.default_class(self.cluster)
        dvs = self.cluster.resources[ResourceKind.DATA_VOLUME].values()
        waiting = (
            0
            if default is not None
            else sum(1 for dv in dvs if dv.status.get("phase", "Pending") == "Pending")
        )
        pending.add_metric([], float(waiting))
        restarts = GaugeMetricFamily(
            "kubevirt_cdi_import_pods_high_restart",
            "The number of CDI import pods with high restart count",
        )
        restarts.add_metric([], 0.0)
        labels = ["storageclass", "provisioner", "complete", "default", "rwx"]
        profiles = GaugeMetricFamily(
            "kubevirt_cdi_storageprofile_info",
            "`StorageProfiles` info labels: `storageclass`, `provisioner`, `complete` "
            "indicates if all storage profiles recommended PVC settings are complete, "
            "`default` indicates if it's the Kubernetes default storage class, `rwx` "
            "indicates if the storage class supports `ReadWriteMany`",
            labels=labels,
        )
        table = self.cluster.resources[ResourceKind.STORAGE_CLASS]
        for name in sorted(table):
            klass = table[name]
            is_default = default is not None and default.name == name
            profiles.add_metric(
                [
                    name,
                    str(klass.manifest.get("provisioner") or ""),
                    "true",
                    str(is_default).lower(),
                    str(storage.is_shared(klass)).lower(),
                ],
                1.0,
            )
        yield from (ready, pending, restarts, profiles)
        yield from self._cdi_progress(dvs)
        yield self._cdi_crons(default is None)

    def _cdi_progress(self, dvs: Iterable[ResourceView]) -> Iterator[Metric]:
        """CDI's importer's and cloner's progress (a percentage) of each DataVolume while
        its import or clone runs, by the DataVolume's uid (`ownerUID`), as their pods
        export it while they run."""
        imports = CounterMetricFamily(
            "kubevirt_cdi_import_progress",
            "The import progress in percentage",
            labels=["ownerUID"],
        )
        clones = CounterMetricFamily(
            "kubevirt_cdi_clone_progress", "The clone progress in percentage", labels=["ownerUID"]
        )
        running = {"ImportInProgress": imports, "CloneInProgress": clones}
        for dv in dvs:
            family = running.get(str(dv.status.get("phase") or ""))
            if family is None:
                continue
            try:
                percent = float(str(dv.status.get("progress") or "0").rstrip("%"))
            except ValueError:
                continue  # "N/A"
            family.add_metric([dv.uid], percent)
        yield from (imports, clones)

    def _cdi_crons(self, no_default_class: bool) -> Metric:
        """1 for each DataImportCron whose latest import is not up to date (`pending` while
        its import waits for a default storage class)."""
        outdated = GaugeMetricFamily(
            "kubevirt_cdi_dataimportcron_outdated",
            "DataImportCron has an outdated import",
            labels=["namespace", "cron_name", "pending"],
        )
        for cron in self.cluster.resources[dataimportcron.KIND_TOKEN].values():
            conditions = cron.status.get("conditions") or []
            up = any(c.get("type") == "UpToDate" and c.get("status") == "True" for c in conditions)
            template = ((cron.spec.get("template") or {}).get("spec") or {}).get("storage") or {}
            pending = not up and no_default_class and not template.get("storageClassName")
            outdated.add_metric(
                [cron.namespace, cron.name, str(pending).lower()], 0.0 if up else 1.0
            )
        return outdated


def template_meta(vm_manifest: dict[str, Any]) -> dict[str, Any]:
    """The VMI template of a VM, where KubeVirt reads os/workload/flavor annotations."""
    return ((vm_manifest.get("spec") or {}).get("template")) or {}


def system_info(manifest: dict[str, Any]) -> tuple[str, str, str]:
    """(os, workload, flavor) from the `vm.kubevirt.io/*` annotations, "" when missing."""
    ann = (manifest.get("metadata") or {}).get("annotations") or {}

    def get(k: str) -> str:
        return str(ann.get(ANNOTATION_PREFIX + k, ""))

    return get("os"), get("workload"), get("flavor")
