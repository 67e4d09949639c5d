"""What a VM's status shows of the snapshots and restores working on it (KubeVirt's
`status.snapshotInProgress` and `status.restoreInProgress`), derived at read time."""

from __future__ import annotations

from typing import Any

from events.meta import ResourceKind
from projections.cluster import Cluster
from projections.views import VMView

JSON = dict[str, Any]


def failed(status: JSON) -> bool:
    """A restore's terminal failure: its Failure condition is True."""
    return any(
        c.get("type") == "Failure" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def in_progress(cluster: Cluster, vm: VMView) -> JSON:
    """The snapshot (phase InProgress, taken of this VM) and the restore (neither complete
    nor failed, targeting it) that are working on the VM."""
    out: JSON = {}
    for snap in cluster.resources[ResourceKind.SNAPSHOT].values():
        if snap.namespace != vm.namespace or not snap.status_json:
            continue
        st = snap.status
        if (
            (snap.spec.get("source") or {}).get("name") == vm.name
            and st.get("phase") == "InProgress"
            and st.get("sourceUID") == vm.uid
        ):
            out["snapshotInProgress"] = snap.name
    for restore in cluster.resources[ResourceKind.RESTORE].values():
        if restore.namespace != vm.namespace or not restore.status_json:
            continue
        st = restore.status
        if (
            (restore.spec.get("target") or {}).get("name") == vm.name
            and not st.get("complete")
            and not failed(st)
        ):
            out["restoreInProgress"] = restore.name
    return out
