"""CDI's DataImportCron (cdi.kubevirt.io/v1beta1, namespaced): keeps a DataSource
(`spec.managedDataSource`) pointing at the latest import of an image, the golden images
VM managers clone from. The import is a DataVolume made from `spec.template`, named for
the DataSource and the source's digest (services/controller/dataimportcron.py).

Admission is CDI's webhook (dataimportcron-validate.go): a template with a registry or pvc
source and none of the fields the cron sets itself, a standard cron `schedule`, a
non-negative `importsToKeep`, `garbageCollect` Outdated or Never, a `managedDataSource`;
the spec never changes after creation. The schedule is parsed by cronsim (docs/DECISIONS.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from cronsim import CronSim, CronSimError

from core import admission
from core.kind import SpecRefusal
from events.meta import ResourceKind
from events.objects import SpecObject, _always
from kinds.resource import resource_spec
from projections.cluster import Cluster

KIND_TOKEN = ResourceKind.DATA_IMPORT_CRON
WEBHOOK = admission.WEBHOOKS["DataImportCron"]
GARBAGE_COLLECT = ("Outdated", "Never")
UNSETTABLE = ("sourceRef", "contentType", "checkpoints", "finalCheckpoint")
# robfig/cron's descriptors, which CDI's parser takes, as the five fields they stand for
DESCRIPTORS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
JSON = dict[str, Any]


class DataImportCron(SpecObject):
    api_version: str = _always("cdi.kubevirt.io/v1beta1")
    kind: str = _always("DataImportCron")


def valid_schedule(schedule: str) -> bool:
    """A standard five-field cron expression (or one of its descriptors)."""
    expression = DESCRIPTORS.get(schedule.strip(), schedule)
    try:
        CronSim(expression, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError:
        return False
    return True


def _admit(_: Cluster, typed: Any, __: str) -> tuple[Any, list[Any]]:
    causes = admission.validate_name(typed.metadata.name, typed.metadata.generate_name)
    if not causes and (refused := _refusal(typed.spec)) is not None:
        causes = [admission.cause("FieldValueInvalid", *refused)]
    return typed, causes


def _refusal(spec: JSON) -> tuple[str, str] | None:
    """The first rule the spec breaks, as (message, field), in the webhook's order."""
    template: JSON = (spec.get("template") or {}).get("spec") or {}
    source: JSON = template.get("source") or {}
    keep, collect = spec.get("importsToKeep"), spec.get("garbageCollect")
    schedule = str(spec.get("schedule") or "")
    if "registry" not in source and "pvc" not in source:
        return "Missing source", "spec.Template"
    if any(template.get(f) for f in UNSETTABLE):
        message = "Unsettable fields: SourceRef, ContentType, Checkpoints, FinalCheckpoint"
        return message, "spec.Template"
    if "registry" in source and not (source["registry"] or {}).get("url"):
        return "Source registry should have either URL or ImageStream", "Template.source.Registry"
    if schedule and not valid_schedule(schedule):
        return "Illegal cron schedule", "spec.Schedule"
    if keep is not None and (not isinstance(keep, int) or keep < 0):
        return "Illegal ImportsToKeep value", "spec.ImportsToKeep"
    if collect is not None and collect not in GARBAGE_COLLECT:
        return "Illegal GarbageCollect value", "spec.GarbageCollect"
    if not spec.get("managedDataSource"):
        return "Illegal ManagedDataSource value", "spec.ManagedDataSource"
    return None


SPEC = resource_spec(
    group="cdi.kubevirt.io",
    version="v1beta1",
    kind="DataImportCron",
    plural="dataimportcrons",
    singular="dataimportcron",
    short_names=("dic", "dics"),
    categories=("all",),
    event_kind=KIND_TOKEN,
    object_type=DataImportCron,
    admit=_admit,
    subresource_group="",
    updatable=False,
    spec_refusal=SpecRefusal(
        WEBHOOK, "Cannot update DataImportCron Spec", "FieldValueDuplicate", "DataImportCron.Spec"
    ),
)
