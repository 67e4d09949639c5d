"""Placing launcher pods on nodes, the kube-scheduler way (the required predicates only).

`place` filters nodes by: schedulable (not cordoned, not unresponsive), taints vs
tolerations, nodeSelector and required node affinity, free CPU/memory, required pod
affinity/anti-affinity (against the labels of the non-final VMIs on each node, both ways);
then scores: `spread` (the default) picks the node with the least allocated memory, `pack`
the most (fewer nodes busier), then by name; with resource weights, by the weighted share
of capacity allocated instead (kube-scheduler's NodeResourcesFit). It takes extra
constraints (excluded nodes, an added node selector) so migrations can place a target.
When nothing fits it says why, in kube-scheduler's words."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from events.catalog import Attachment, Event, PodScheduled, Taint, Unschedulable
from events.envelope import Context
from kinds import nad
from projections import claims, storage
from projections.allocation import node_allocated, vmi_requests
from projections.cluster import Cluster, key
from projections.launcher_pods import pod_name as pod_name  # the migration's target pods too
from projections.views import NodeView, VMIView
from services.controller import emit, ipam
from services.controller.placement_index import PlacementIndex

JSON = dict[str, Any]
HOSTNAME = "kubernetes.io/hostname"

SPREAD = "spread"  # the least allocated node that fits (kube-scheduler's LeastAllocated)
PACK = "pack"  # the most allocated node that fits (MostAllocated: bin packing)
POLICIES = (SPREAD, PACK)
RESOURCES = ("cpu", "memory")  # what a weight may name
# kube-scheduler's NodeResourcesFit scoringStrategy.resources: (resource, weight), in order;
# none: nodes are ranked by allocated memory bytes alone (today's rank)
Weights = tuple[tuple[str, int], ...]


def parse_weights(text: str) -> Weights:
    """`cpu=1,memory=2` → the weights; ValueError saying what is wrong."""
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, _, value = part.partition("=")
        if name not in RESOURCES:
            raise ValueError(f"unknown resource {name!r} in {text!r}: {' | '.join(RESOURCES)}")
        if not value.isdigit() or not 0 <= int(value) <= 100:
            raise ValueError(f"weight of {name} in {text!r}: an integer from 0 to 100")
        out.append((name, int(value)))
    if out and not sum(w for _, w in out):
        raise ValueError(f"{text!r}: the weights are all 0")
    return tuple(out)


UNSCHEDULABLE = "node(s) were unschedulable"
NODE_SELECTOR = "node(s) didn't match Pod's node affinity/selector"
POD_AFFINITY = "node(s) didn't match pod affinity rules"
POD_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"


@dataclass(frozen=True)
class Placement:
    node: str


@dataclass(frozen=True)
class NoFit:
    message: str


@dataclass
class Reserved:
    """Placements decided in this pass that the cluster view does not show yet."""

    cpu: Counter[str] = field(default_factory=Counter)
    memory: Counter[str] = field(default_factory=Counter)
    manifests: dict[str, list[JSON]] = field(default_factory=dict)
    pod_addresses: set[str] = field(default_factory=set)
    attachment_addresses: dict[str, set[str]] = field(default_factory=dict)  # by definition

    def add(self, node: str, manifest: JSON) -> None:
        c, m = vmi_requests(manifest)
        self.cpu[node] += c
        self.memory[node] += m
        self.manifests.setdefault(node, []).append(manifest)


# ---------------------------------------------------------------------- matching
def node_labels(node: NodeView) -> dict[str, str]:
    return {HOSTNAME: node.name, **node.labels}


def label_selector_matches(selector: JSON | None, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector: a missing selector matches nothing, an empty one everything."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    return all(_requirement(e, labels) for e in selector.get("matchExpressions") or ())


def _requirement(expr: JSON, labels: Mapping[str, str]) -> bool:
    k, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
    match op:
        case "In":
            return k in labels and labels[k] in values
        case "NotIn":
            return k not in labels or labels[k] not in values
        case "Exists":
            return k in labels
        case "DoesNotExist":
            return k not in labels
        case "Gt" | "Lt":
            try:
                have, want = int(labels[k]), int(values[0])
            except (KeyError, IndexError, ValueError):
                return False
            return have > want if op == "Gt" else have < want
    return False


def _node_selector_term(term: JSON, node: NodeView, labels: Mapping[str, str]) -> bool:
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches no node
    return all(_requirement(e, labels) for e in exprs) and all(
        _requirement(f, {"metadata.name": node.name}) for f in fields
    )


def matches_node_selection(
    spec: JSON, node: NodeView, extra_selector: Mapping[str, str] | None = None
) -> bool:
    labels = node_labels(node)
    selector = {**(spec.get("nodeSelector") or {}), **(extra_selector or {})}
    if any(labels.get(k) != v for k, v in selector.items()):
        return False
    na = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = na.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    terms = required.get("nodeSelectorTerms") or []
    return any(_node_selector_term(t, node, labels) for t in terms)


def tolerates(tolerations: Sequence[JSON], taint: Taint) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.effect:
            continue
        if t.get("operator", "Equal") == "Exists":
            if not t.get("key") or t["key"] == taint.key:
                return True
        elif t.get("key") == taint.key and (t.get("value") or "") == taint.value:
            return True
    return False


def untolerated_taint(spec: JSON, node: NodeView) -> Taint | None:
    tolerations = spec.get("tolerations") or []
    for taint in node.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            return taint
    return None


# ------------------------------------------------------------ inter-pod affinity
@dataclass(frozen=True)
class _Peer:
    node: str
    namespace: str
    labels: Mapping[str, str]
    manifest: JSON


def _meta(manifest: JSON) -> JSON:
    return manifest.get("metadata") or {}


def _peers(
    cluster: Cluster, reserved: Reserved, vmis: Iterable[VMIView] | None = None
) -> list[_Peer]:
    """Non-final VMIs placed on known nodes (or only `vmis` of them), plus this pass's
    reservations."""
    peers = []
    if vmis is None:
        vmis = (v for node in cluster.nodes for v in cluster.vmis_on(node))
    for vmi in vmis:
        if not vmi.final and vmi.node in cluster.nodes:
            manifest = vmi.manifest
            labels = _meta(manifest).get("labels") or {}
            peers.append(_Peer(vmi.node, vmi.namespace, labels, manifest))
    for node, manifests in reserved.manifests.items():
        for m in manifests:
            md = _meta(m)
            peers.append(_Peer(node, md.get("namespace", ""), md.get("labels") or {}, m))
    return peers


def _terms(manifest: JSON, kind: str) -> list[JSON]:
    aff = ((manifest.get("spec") or {}).get("affinity") or {}).get(kind) or {}
    return list(aff.get("requiredDuringSchedulingIgnoredDuringExecution") or [])


def _term_selects(term: JSON, term_ns: str, namespace: str, labels: Mapping[str, str]) -> bool:
    namespaces = term.get("namespaces") or [term_ns]
    return namespace in namespaces and label_selector_matches(term.get("labelSelector"), labels)


def _domains(
    term: JSON, owner_ns: str, peers: Iterable[_Peer], labels_of: Mapping[str, Mapping[str, str]]
) -> set[str]:
    """Topology domains (values of the term's topologyKey) holding a peer it selects."""
    topo = term.get("topologyKey") or HOSTNAME
    out = set()
    for p in peers:
        if _term_selects(term, owner_ns, p.namespace, p.labels):
            value = labels_of.get(p.node, {}).get(topo)
            if value is not None:
                out.add(value)
    return out


class _PodAffinity:
    """Per-node verdicts of the required pod (anti-)affinity, computed once per VMI."""

    def __init__(
        self,
        manifest: JSON,
        cluster: Cluster,
        reserved: Reserved,
        index: PlacementIndex | None = None,
    ) -> None:
        md = _meta(manifest)
        ns, labels = md.get("namespace", ""), md.get("labels") or {}
        own_terms = _terms(manifest, "podAffinity") or _terms(manifest, "podAntiAffinity")
        if index is None or own_terms:
            peers = _peers(cluster, reserved)
        else:  # only the existing pods' anti-affinity can concern this pod
            peers = _peers(cluster, reserved, index.anti_affine_vmis(cluster))
        self.labels_of = {n.name: node_labels(n) for n in cluster.nodes.values()}
        self.affinity = []
        for term in _terms(manifest, "podAffinity"):
            domains = _domains(term, ns, peers, self.labels_of)
            # the first pod of a group may go anywhere if it matches its own term
            if not domains and _term_selects(term, ns, ns, labels):
                continue
            self.affinity.append((term.get("topologyKey") or HOSTNAME, domains))
        self.anti = [
            (t.get("topologyKey") or HOSTNAME, _domains(t, ns, peers, self.labels_of))
            for t in _terms(manifest, "podAntiAffinity")
        ]
        # existing VMIs' anti-affinity that this VMI's labels would violate
        self.existing: list[tuple[str, str]] = []
        for p in peers:
            for term in _terms(p.manifest, "podAntiAffinity"):
                if _term_selects(term, p.namespace, ns, labels):
                    topo = term.get("topologyKey") or HOSTNAME
                    value = self.labels_of.get(p.node, {}).get(topo)
                    if value is not None:
                        self.existing.append((topo, value))

    def reason(self, node: str) -> str | None:
        labels = self.labels_of.get(node, {})
        for topo, domains in self.affinity:
            if labels.get(topo) not in domains:
                return POD_AFFINITY
        for topo, domains in self.anti:
            if labels.get(topo) in domains:
                return POD_ANTI_AFFINITY
        for topo, value in self.existing:
            if labels.get(topo) == value:
                return EXISTING_ANTI_AFFINITY
        return None


# ------------------------------------------------------------------------- place
def place(
    manifest: JSON,
    cluster: Cluster,
    *,
    exclude: Iterable[str] = (),
    extra_selector: Mapping[str, str] | None = None,
    reserved: Reserved | None = None,
    index: PlacementIndex | None = None,
    policy: str = SPREAD,
    weights: Weights = (),
) -> Placement | NoFit:
    """Where a pod for this VMI manifest can run. `exclude`: nodes that must not be chosen
    (a migration's source); `extra_selector`: labels the node must also have. `index`
    (the controller's, in step with `cluster`) answers allocations without a scan.
    `policy`: how the nodes that fit are scored (SPREAD or PACK); `weights`: by the
    weighted share of each resource's capacity they would have allocated with this pod
    (kube-scheduler's LeastAllocated / MostAllocated), rather than by allocated memory."""
    reserved = reserved or Reserved()
    spec = manifest.get("spec") or {}
    excluded = set(exclude)
    cpu, mem = vmi_requests(manifest)
    affinity = _PodAffinity(manifest, cluster, reserved, index)
    allocated: dict[str, tuple[int, int]] = {}

    def used(node: str) -> tuple[int, int]:
        if node not in allocated:
            if index is not None:
                allocated[node] = index.allocated(cluster, node)
            else:
                allocated[node] = node_allocated(cluster, node)[:2]
        return allocated[node]

    reasons: Counter[str] = Counter()
    fits: list[tuple[int, str]] = []
    for node in sorted(cluster.nodes.values(), key=lambda n: n.name):
        why = _filter(node, spec, used, reserved, cpu, mem, excluded, extra_selector)
        if not why:
            r = affinity.reason(node.name)
            why = [r] if r else []
        if why:
            reasons.update(why)
            continue
        if weights:
            score = _weighted(node, used(node.name), reserved, cpu, mem, weights)
        else:
            score = used(node.name)[1] + reserved.memory[node.name]
        fits.append((-score if policy == PACK else score, node.name))
    if fits:
        return Placement(min(fits)[1])
    return NoFit(unschedulable_message(len(cluster.nodes), reasons))


def _weighted(
    node: NodeView,
    used: tuple[int, int],
    reserved: Reserved,
    cpu: int,
    mem: int,
    weights: Weights,
) -> int:
    """The weighted share (0-100) of the node's capacity allocated with this pod, in
    kube-scheduler's integer arithmetic."""
    requested = {
        "cpu": (used[0] + reserved.cpu[node.name] + cpu, node.capacity.cpu_millis),
        "memory": (used[1] + reserved.memory[node.name] + mem, node.capacity.memory_bytes),
    }
    total = 0
    for name, weight in weights:
        asked, capacity = requested[name]
        total += weight * (asked * 100 // capacity if capacity else 100)
    return total // sum(w for _, w in weights)


def _filter(
    node: NodeView,
    spec: JSON,
    used: Callable[[str], tuple[int, int]],
    reserved: Reserved,
    cpu: int,
    mem: int,
    excluded: set[str],
    extra_selector: Mapping[str, str] | None,
) -> list[str]:
    """The first predicate the node fails, kube-scheduler's order (both resources)."""
    if node.name in excluded:
        return [POD_ANTI_AFFINITY]  # migration targets are anti-affine to the source
    if not node.schedulable:
        return [UNSCHEDULABLE]
    taint = untolerated_taint(spec, node)
    if taint is not None:
        return [f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"]
    if not matches_node_selection(spec, node, extra_selector):
        return [NODE_SELECTOR]
    used_cpu, used_mem = used(node.name)
    why = []
    if used_cpu + reserved.cpu[node.name] + cpu > node.capacity.cpu_millis:
        why.append("Insufficient cpu")
    if used_mem + reserved.memory[node.name] + mem > node.capacity.memory_bytes:
        why.append("Insufficient memory")
    return why


def unschedulable_message(total: int, reasons: Mapping[str, int]) -> str:
    if total == 0:
        return "0/0 nodes are available: no nodes available to schedule pods."
    parts = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
    return f"0/{total} nodes are available: {parts}."


# ---------------------------------------------------------------------- decisions
def pod_manifest(cluster: Cluster, vmi: VMIView, manifest: JSON) -> JSON:
    """What the VMI's launcher pod is given: the VMI, with the sizes of its claims (the
    claim objects', else what its VM's dataVolumeTemplates request,
    `projections/claims.py`)."""
    vm = cluster.vms.get(key(vmi.namespace, vmi.name)) if vmi.owner_vm_uid else None
    owned = vm is not None and vm.uid == vmi.owner_vm_uid
    sizes = claims.claim_sizes(manifest, vm.manifest if vm is not None and owned else None)
    for name in storage.claims_of(manifest):  # a claim object's size is its disk's
        claim = storage.find_claim(cluster, vmi.namespace, name)
        if claim is not None:
            capacity = (claim.status.get("capacity") or {}).get("storage")
            sizes[name] = str(capacity or storage.requested(claim.spec) or sizes.get(name, ""))
    return claims.with_claim_sizes(manifest, {k: v for k, v in sizes.items() if v})


def held_addresses(cluster: Cluster, network: str, index: PlacementIndex | None = None) -> set[str]:
    """The addresses VMIs that have not ended hold on the pod network (`network` "") or on
    a secondary network's definition, wherever they run now (an address follows its VMI's
    migrations): from the index, else a scan of every VMI."""
    if index is not None:
        return index.held.get(network, set())
    if not network:
        return {v.pod_address for v in cluster.vmis.values() if v.pod_address and not v.final}
    return {
        a.address
        for v in cluster.vmis.values()
        if not v.final
        for a in v.attachments
        if a.definition == network and a.address
    }


def pod_address(
    cluster: Cluster, node: str, reserved: Reserved, index: PlacementIndex | None = None
) -> str:
    """A free address of the node's pod CIDR (`ipam.py`)."""
    view = cluster.nodes.get(node)
    if view is None or not view.pod_cidr:
        return ""
    held = held_addresses(cluster, "", index)
    return ipam.allocate(view.pod_cidr, ipam.Taken(held, reserved.pod_addresses))


def attachments(
    cluster: Cluster,
    namespace: str,
    manifest: Mapping[str, Any],
    reserved: Reserved,
    index: PlacementIndex | None = None,
) -> tuple[Attachment, ...]:
    """An address on each secondary network whose definition is a `bridge` with
    `host-local` IPAM (`kinds/nad.py`): held are those of every VMI that has not ended.
    A network of another kind of definition gets none (its NIC is QEMU's user network)."""
    networks = (manifest.get("spec") or {}).get("networks") or []
    out = []
    table = cluster.resources[nad.KIND_TOKEN]
    for network in networks:
        multus = network.get("multus") if isinstance(network, Mapping) else None
        if not isinstance(multus, Mapping) or not multus.get("networkName"):
            continue
        ns, name = nad.nad_key(namespace, str(multus["networkName"]))
        view = table.get(key(ns, name))
        block = nad.bridge_ipam(view.manifest.get("spec") or {}) if view else None
        if block is None:
            continue
        definition = f"{ns}/{name}"
        held = held_addresses(cluster, definition, index)
        taken = reserved.attachment_addresses.setdefault(definition, set())
        address = ipam.allocate_in(block.first, block.last, block.gateway, ipam.Taken(held, taken))
        taken.add(address)
        out.append(
            Attachment(
                network=str(network.get("name") or ""),
                definition=definition,
                address=address,
                subnet=block.subnet,
                gateway=block.gateway,
            )
        )
    return tuple(out)


def needs_node(vmi: VMIView) -> bool:
    # Scheduling without a node = its pod is pending, Unschedulable (KubeVirt's phase)
    return (
        vmi.phase in ("Pending", "Scheduling")
        and not vmi.node
        and vmi.deletion_requested_at is None
        and not vmi.final
    )


def schedule_pending(
    cluster: Cluster,
    ctx: Context,
    reserved: Reserved | None = None,
    index: PlacementIndex | None = None,
    policy: str = SPREAD,
    weights: Weights = (),
) -> list[Event]:
    """Place every VMI waiting for a node, oldest first; each placement counts against the
    capacity seen by the next (and `reserved`: e.g. migration targets placed in this pass);
    `policy` and `weights` score the nodes that fit (see `place`).
    A VMI that does not fit gets Unschedulable once per distinct reason."""
    candidates = index.pending(cluster) if index is not None else cluster.vmis.values()
    pending = sorted(
        (v for v in candidates if needs_node(v)),
        key=lambda v: (v.created_at, v.namespace, v.name),
    )
    reserved = reserved if reserved is not None else Reserved()
    out: list[Event] = []
    for vmi in pending:
        manifest = vmi.manifest  # decoded once per pass
        # its claims first: a missing one waits; one on a node's disk pins it there
        pinned, waiting = storage.placement(cluster, vmi.namespace, manifest)
        result: Placement | NoFit = NoFit(waiting)
        if not waiting:
            pin = {HOSTNAME: pinned} if pinned else None
            result = place(
                manifest,
                cluster,
                reserved=reserved,
                index=index,
                extra_selector=pin,
                policy=policy,
                weights=weights,
            )
        agg = emit.vmi_aggregate(vmi)
        if isinstance(result, Placement):
            reserved.add(result.node, manifest)
            address = pod_address(cluster, result.node, reserved, index)
            reserved.pod_addresses.add(address)
            k = f"schedule/{vmi.uid}"
            out.append(
                PodScheduled(
                    meta=emit.meta(ctx, agg, k, node=result.node),
                    node=result.node,
                    pod_name=pod_name(vmi.name, vmi.uid),
                    pod_uid=emit.new_uid(ctx, k),
                    manifest=pod_manifest(cluster, vmi, manifest),
                    pod_address=address,
                    attachments=attachments(cluster, vmi.namespace, manifest, reserved, index),
                )
            )
        elif result.message != vmi.unschedulable:
            out.append(
                Unschedulable(
                    meta=emit.meta(ctx, agg, f"unschedulable/{vmi.uid}/{vmi.version}"),
                    reason="Unschedulable",
                    message=result.message,
                )
            )
    return out
