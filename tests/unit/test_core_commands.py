"""The application core's commands on plain data: a request decoded into a command (its
body and options checked before anything is decided), and the command decided on a
cluster view, as both transports have it done."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from core import commands
from core.commands import Call, Create, Delete, Patch, Request, Update, Verb
from core.context import RequestContext
from core.errors import ApiError
from core.idempotency import Idempotency
from events.catalog import Event, VMCreated, VMDeleted, VMRunStrategyChanged
from events.envelope import Stored
from events.meta import Kind
from kinds import vm
from kinds.registry import REGISTRY
from projections.cluster import Cluster
from tests.factories import meta, vm_manifest

_ids = itertools.count(1)
UPDATABLE = REGISTRY.updatable


def ctx() -> RequestContext:
    return RequestContext(
        now=1000.0,
        correlation_id="req-1",
        new_id=lambda: f"{next(_ids):032x}",
        suffix=lambda: "abcde",
    )


def with_vm() -> Cluster:
    c = Cluster()
    event = VMCreated(meta=meta(Kind.VM, "vm1"), manifest=vm_manifest("vm1", "Halted"))
    c.apply(Stored(seq=1, subject="", time=0.0, event=event))
    return c


def request(verb: Verb, name: str = "", body: Any = None, **kw: Any) -> Request:
    data = body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
    return Request(verb=verb, spec=vm.SPEC, namespace="default", name=name, body=data, **kw)


def refusal(req: Request) -> tuple[int, str]:
    with pytest.raises(ApiError) as exc:
        commands.decode(req)
    return exc.value.code, exc.value.status.message


def decided(req: Request, cluster: Cluster) -> tuple[Event, ...]:
    outcome = commands.decide(commands.decode(req), cluster, ctx(), UPDATABLE)
    return tuple(a.event for a in outcome.appends)


def test_only_the_write_options_are_read() -> None:
    source = {"dryRun": "All", "Authorization": "Bearer x", "pretty": "true", "force": "1"}
    assert commands.params(source) == {"dryRun": "All", "force": "1"}


MERGE = "application/merge-patch+json"


def test_a_body_and_its_options_are_checked_before_anything_is_decided() -> None:
    assert refusal(request(Verb.CREATE, body=[1]))[0] == 400
    assert refusal(request(Verb.CREATE, body=vm_manifest("a"), params={"dryRun": "Some"}))[0] == 422
    bad_mode = {"fieldValidation": "Loose"}
    assert refusal(request(Verb.PATCH, "vm1", {}, content_type=MERGE, params=bad_mode))[0] == 400
    assert refusal(request(Verb.PATCH, "vm1", {}, content_type="text/plain"))[0] == 415
    code, message = refusal(request(Verb.DELETE, "vm1", {"propagationPolicy": "Abandon"}))
    assert code == 422 and "Abandon" in message
    assert refusal(request(Verb.CALL, "vm1", {}, action="frobnicate"))[0] == 404
    assert refusal(request(Verb.CREATE, body=b"x" * (3 * 1024 * 1024 + 1)))[0] == 413


def test_a_create_addressed_by_name_takes_it_and_refuses_another() -> None:
    cmd = commands.decode(request(Verb.CREATE, "named", {**vm_manifest("named"), "metadata": {}}))
    assert isinstance(cmd, Create) and cmd.body["metadata"]["name"] == "named"
    code, message = refusal(request(Verb.CREATE, "named", vm_manifest("other")))
    assert code == 400 and "does not match the name on the subject (named)" in message


def test_a_create_or_an_update_stores_no_null_field() -> None:
    # what Ansible's kubevirt_vm sends (`runStrategy: null` beside `running`): stored without
    # it, so that its next run's merge patch (null: remove) changes nothing
    body = vm_manifest("vm1")
    body["spec"] = {**body["spec"], "runStrategy": None, "running": True}
    body["metadata"]["labels"] = {"a": None, "b": "1"}
    for verb in (Verb.CREATE, Verb.UPDATE):
        cmd = commands.decode(request(verb, "vm1" if verb == Verb.UPDATE else "", body))
        assert isinstance(cmd, Create | Update)
        assert "runStrategy" not in cmd.body["spec"] and cmd.body["spec"]["running"] is True
        assert cmd.body["metadata"]["labels"] == {"b": "1"}


def test_an_update_records_its_field_manager_named_by_the_agent() -> None:
    """Without `fieldManager`, the User-Agent up to its first `/` manages what changed; one
    without either is `unknown`, as the API server names it."""
    body = vm_manifest("vm1", "Manual")
    for agent, manager in (("kubectl/v1.30", "kubectl"), ("", "unknown")):
        cmd = commands.decode(request(Verb.UPDATE, "vm1", body, agent=agent))
        assert isinstance(cmd, Update) and cmd.manager == manager
        (event,) = decided(request(Verb.UPDATE, "vm1", body, agent=agent), with_vm())
        fields = event.manifest["metadata"]["managedFields"]  # type: ignore[attr-defined]
        assert [(f["manager"], f["operation"]) for f in fields] == [(manager, "Update")]


def test_a_delete_checks_its_preconditions_in_the_same_decision() -> None:
    c = with_vm()
    current = c.vms["default/vm1"]
    with pytest.raises(ApiError) as exc:
        decided(request(Verb.DELETE, "vm1", {"preconditions": {"uid": "another"}}), c)
    assert exc.value.code == 409
    assert exc.value.status.message.endswith(
        f"Precondition failed: UID in precondition: another, UID in object meta: {current.uid}"
    )
    pre = {"preconditions": {"uid": current.uid}, "gracePeriodSeconds": 0}
    cmd = commands.decode(request(Verb.DELETE, "vm1", pre))
    assert isinstance(cmd, Delete) and cmd.args.grace() == 0
    (event,) = decided(request(Verb.DELETE, "vm1", pre), c)
    assert isinstance(event, VMDeleted) and event.grace_period_seconds == 0


def test_a_patch_reports_the_unknown_fields_of_what_it_made() -> None:
    req = request(Verb.PATCH, "vm1", {"spec": {"frobnicate": 1}}, content_type=MERGE)
    cmd = commands.decode(req)
    assert isinstance(cmd, Patch)
    outcome = commands.decide(cmd, with_vm(), ctx(), UPDATABLE)
    assert outcome.warnings == ('unknown field "spec.frobnicate"',)
    strict = request(Verb.PATCH, "vm1", {"spec": {"frobnicate": 1}}, content_type=MERGE,
                     params={"fieldValidation": "Strict"})  # fmt: skip
    with pytest.raises(ApiError) as exc:
        decided(strict, with_vm())
    assert exc.value.code == 400


def test_a_subresource_is_the_kinds_act() -> None:
    cmd = commands.decode(request(Verb.CALL, "vm1", {}, action="start"))
    assert isinstance(cmd, Call) and cmd.sub.name == "start"
    events = decided(request(Verb.CALL, "vm1", {}, action="start"), with_vm())
    assert [type(e) for e in events] == [VMRunStrategyChanged]  # a Halted VM: Always


def test_an_idempotency_key_is_bound_to_the_request_not_its_transport() -> None:
    a = request(Verb.UPDATE, "vm1", vm_manifest("vm1"), params={"dryRun": "All"})
    b = request(Verb.UPDATE, "vm1", vm_manifest("vm1"))
    same = Idempotency.of("k", a.identity, a.body)
    assert same == Idempotency.of("k", a.identity, a.body)
    assert same != Idempotency.of("k", b.identity, b.body)
    assert Idempotency.of("  ", a.identity, a.body) is None
    with pytest.raises(ApiError):
        Idempotency.of("k" * 257, a.identity, a.body)
