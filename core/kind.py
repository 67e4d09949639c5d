"""What the commands read of a resource kind: `KindRules` (the registry's `KindSpec`
is the one implementation, in `kinds/`, above this package), and the hooks a kind hands
them: a subresource, the arguments a delete or subresource call reads, what it answers.
Pure."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any, Protocol

import msgspec

from core.context import Outcome, RequestContext
from core.errors import Resource, bad_request
from core.names import NameRule
from events.catalog import Event
from events.envelope import Stored
from events.meta import KindToken, Meta
from projections.cluster import Cluster

JSON = dict[str, Any]


def grace_period(query: Mapping[str, str], body: JSON) -> int | None:
    """`?gracePeriodSeconds=`, else the body's `gracePeriodSeconds` / `gracePeriod`."""
    value: Any = query.get("gracePeriodSeconds")
    if value is None:
        value = body.get("gracePeriodSeconds", body.get("gracePeriod"))
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        raise bad_request(f"invalid gracePeriodSeconds: {value!r}") from None


class Answer(StrEnum):
    """What a subresource answers once its events are appended."""

    EMPTY = "empty"  # no body, the subresource's code (KubeVirt's start/stop/pause/...)
    OBJECT = "object"  # the object the outcome names, with the outcome's code
    CREATED = "created"  # the object the outcome created, with the subresource's code


class CallArgs(msgspec.Struct, frozen=True):
    """What a delete or subresource call's pure act reads: the JSON body and the query."""

    body: JSON
    query: Mapping[str, str]

    def grace(self) -> int | None:
        return grace_period(self.query, self.body)


Act = Callable[[Cluster, str, str, CallArgs, RequestContext], Outcome]
# A kind whose objects are no stored manifest (nodes): the events an object as written
# (a PUT's body, what a PATCH or an apply made of the object as served) is recorded as.
# (cluster, namespace, name, written object, context) → Outcome
Replace = Callable[[Cluster, str, str, JSON, RequestContext], Outcome]


class Subresource(msgspec.Struct, frozen=True):
    """`PUT .../{plural}/{name}/{action}` on the kind's subresource group. `act` is pure:
    (cluster, namespace, name, request, context) → Outcome (namespace "" if cluster-scoped)."""

    name: str
    act: Act
    code: int = 202
    answer: Answer = Answer.EMPTY
    reads_body: bool = True  # a body that does not parse is a 400 only when it is read
    method: str = "PUT"
    # the answer made of the rendered object (e.g. an autoscaling/v1 Scale), and its
    # (group, version, kind) for discovery; a PATCH is applied to that shape first
    shape: Callable[[JSON], JSON] | None = None
    response_kind: tuple[str, str, str] | None = None


class SpecRefusal(msgspec.Struct, frozen=True):
    """How a kind whose spec never changes refuses an update that changes it: KubeVirt's
    validating webhook for its updates and the cause it gives."""

    webhook: str
    message: str
    cause_type: str = "FieldValueNotSupported"
    field: str = ""


class KindRules(Protocol):
    """A resource kind as the commands use it: where its objects live and how their names
    are checked, its admission, the events a create or update appends, its delete and
    subresources, and how the read side tables, folds and renders it."""

    @property
    def kind(self) -> str: ...
    @property
    def group(self) -> str: ...
    @property
    def plural(self) -> str: ...
    @property
    def api_version(self) -> str: ...
    @property
    def event_kind(self) -> KindToken: ...
    @property
    def object_type(self) -> type[Any]: ...
    @property
    def namespaced(self) -> bool: ...
    @property
    def name_rule(self) -> NameRule: ...
    @property
    def runs_launcher(self) -> bool: ...
    @property
    def resource(self) -> Resource: ...
    @property
    def admit(self) -> Callable[[Cluster, Any, str], tuple[Any, list[Any]]] | None: ...
    @property
    def created(self) -> Callable[[Meta, JSON], Event] | None: ...
    @property
    def updated(self) -> Callable[[Meta, JSON], Event] | None: ...
    @property
    def spec_refusal(self) -> SpecRefusal | None: ...
    @property
    def replace(self) -> Replace | None: ...
    @property
    def delete(self) -> Act | None: ...
    @property
    def table(self) -> Callable[[Cluster], Mapping[str, Any]]: ...
    @property
    def render(self) -> Callable[[Cluster, Any, float], JSON]: ...
    @property
    def evolve(self) -> Callable[[Any, Stored], Any] | None: ...
    @property
    def convert(self) -> Callable[[JSON], JSON] | None: ...

    def key(self, namespace: str, name: str) -> str: ...

    def subresource(self, name: str, method: str | None = None) -> Subresource | None: ...
