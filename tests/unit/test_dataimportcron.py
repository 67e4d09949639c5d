"""CDI's DataImportCron, pure: its webhook's refusals in CDI's words, the import it makes
(a DataVolume named for the DataSource and the source's digest, labelled with the cron),
and the DataSource it keeps pointing at the import once it succeeded, with CDI's status."""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import pytest

from events.catalog import ImportFinished, ImportRequested, ResourceCreated
from events.meta import ResourceKind
from kinds import dataimportcron
from services.controller.dataimportcron import LABEL, digest, import_name
from tests.unit.test_controller_world import of
from tests.unit.test_storage import world

URL = "docker://quay.io/containerdisks/fedora:40"


def cron(name: str = "fedora-cron", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataImportCron",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "template": {
                "spec": {
                    "source": {"registry": {"url": URL}},
                    "storage": {"resources": {"requests": {"storage": "1Gi"}}},
                }
            },
            "schedule": "0 */12 * * *",
            "managedDataSource": "fedora",
            **spec,
        },
    }


def refusal(body: dict[str, Any]) -> list[str]:
    typed = msgspec.convert(body, dataimportcron.DataImportCron)
    _, causes = dataimportcron.SPEC.admit(None, typed, "")  # type: ignore[arg-type, misc]
    return [f"{c.field}: {c.message}" for c in causes]


def test_the_webhook_refuses_in_cdis_words() -> None:
    assert refusal(cron()) == []
    assert refusal(cron(schedule="@daily")) == []
    no_source = cron()
    no_source["spec"]["template"]["spec"]["source"] = {"http": {"url": "http://x"}}
    assert refusal(no_source) == ["spec.Template: Missing source"]
    assert refusal(cron(schedule="61 * * * *")) == ["spec.Schedule: Illegal cron schedule"]
    assert refusal(cron(schedule="* * *")) == ["spec.Schedule: Illegal cron schedule"]
    assert refusal(cron(importsToKeep=-1)) == ["spec.ImportsToKeep: Illegal ImportsToKeep value"]
    assert refusal(cron(garbageCollect="Always")) == [
        "spec.GarbageCollect: Illegal GarbageCollect value"
    ]
    assert refusal(cron(managedDataSource="")) == [
        "spec.ManagedDataSource: Illegal ManagedDataSource value"
    ]
    typed = cron()
    typed["spec"]["template"]["spec"]["contentType"] = "kubevirt"
    assert refusal(typed) == [
        "spec.Template: Unsettable fields: SourceRef, ContentType, Checkpoints, FinalCheckpoint"
    ]


def test_the_import_and_the_data_source_follow_cdi() -> None:
    w = world()
    out = w.settle(w.when(ResourceCreated(meta=w.m(dataimportcron.KIND_TOKEN, "fedora-cron"),
                                          manifest=cron())))  # fmt: skip
    c = w.state.cluster
    view = c.resources[dataimportcron.KIND_TOKEN]["default/fedora-cron"]
    d = digest(c, view)
    assert d.startswith("sha256:") and len(d) == 7 + 64
    name = import_name("fedora", d)
    assert name == f"fedora-{d[7:19]}"
    dv = c.resources[ResourceKind.DATA_VOLUME][f"default/{name}"]
    assert dv.manifest["metadata"]["labels"] == {LABEL: "fedora-cron"}
    assert dv.spec["source"] == {"registry": {"url": URL}}
    [request] = of(out, ImportRequested)
    assert request.meta.aggregate.name == name
    ds = c.resources[ResourceKind.DATA_SOURCE]["default/fedora"]
    assert ds.manifest["metadata"]["labels"] == {LABEL: "fedora-cron"}
    assert ds.spec["source"] == {}
    conditions = {x["type"]: x for x in view.status["conditions"]}
    assert conditions["UpToDate"]["status"] == "False"
    assert view.status["currentImports"] == [{"DataVolumeName": name, "Digest": d}]

    w.settle(w.when(ImportFinished(meta=w.m(ResourceKind.DATA_VOLUME, name, "node-1"))))
    c = w.state.cluster
    ds = c.resources[ResourceKind.DATA_SOURCE]["default/fedora"]
    assert ds.spec["source"] == {"pvc": {"name": name, "namespace": "default"}}
    assert ds.status["conditions"][0]["status"] == "True"  # the DataSource is Ready
    view = c.resources[dataimportcron.KIND_TOKEN]["default/fedora-cron"]
    conditions = {x["type"]: x for x in view.status["conditions"]}
    assert (conditions["UpToDate"]["status"], conditions["UpToDate"]["reason"]) == (
        "True", "UpToDate")  # fmt: skip
    assert conditions["UpToDate"]["message"] == "Latest import is up to date"
    assert conditions["Progressing"]["reason"] == "NoImport"
    assert view.status["lastImportedPVC"] == {"namespace": "default", "name": name}
    assert view.status["sourceFormat"] == "pvc"
    # nothing more to do: a tick decides nothing
    assert w.settle(w.tick()) == []


def test_a_data_source_the_cron_did_not_make_is_left_alone() -> None:
    w = world()
    mine = {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataSource",
            "metadata": {"name": "fedora", "namespace": "default", "uid": "uid-ds"},
            "spec": {"source": {"pvc": {"name": "golden", "namespace": "default"}}}}  # fmt: skip
    w.run(ResourceCreated(meta=w.m(ResourceKind.DATA_SOURCE, "fedora"), manifest=mine))
    w.settle(w.when(ResourceCreated(meta=w.m(dataimportcron.KIND_TOKEN, "fedora-cron"),
                                    manifest=copy.deepcopy(cron()))))  # fmt: skip
    view = w.state.cluster.resources[dataimportcron.KIND_TOKEN]["default/fedora-cron"]
    name = import_name("fedora", digest(w.state.cluster, view))
    w.settle(w.when(ImportFinished(meta=w.m(ResourceKind.DATA_VOLUME, name, "node-1"))))
    ds = w.state.cluster.resources[ResourceKind.DATA_SOURCE]["default/fedora"]
    assert ds.spec["source"] == {"pvc": {"name": "golden", "namespace": "default"}}


@pytest.mark.parametrize("schedule", ["0 0 * * MON", "*/5 * * * *", "@hourly", "@weekly"])
def test_standard_schedules_are_taken(schedule: str) -> None:
    assert dataimportcron.valid_schedule(schedule)
