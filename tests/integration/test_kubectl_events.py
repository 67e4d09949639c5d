"""Kubernetes Events, derived from the log, through the real kubectl and the official
Python client against one `virtstream up --nodes 1`: `get events` (and its field
selectors), `describe vm|vmi`, `get events -w`, `CoreV1Api.list_namespaced_event` and
`EventsV1Api`, discovery, writes refused, and a `kubevirt.io:view` user reading them."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config, watch

from tests.integration.polling import until
from tests.integration.test_kubectl import KUBECTL, Cluster, Result, _rows, _vm, _write
from tests.integration.up_process import running_up

VIEWER = "viewer-token-for-the-events-test-0123456789"
START = ("patch", "vm", "--type", "merge", "-p", '{"spec":{"runStrategy":"Always"}}')
STOP = ("patch", "vm", "--type", "merge", "-p", '{"spec":{"runStrategy":"Halted"}}')


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_up("vs-kev-", 1) as up:
        path = up.data_dir / "auth.yaml"
        doc = yaml.safe_load(path.read_text())
        doc["tokens"] += [{"token": VIEWER, "user": "vic", "groups": ["viewers"]}]
        doc["roleBindings"] = [
            {
                "name": "viewers",
                "namespace": "default",
                "roleRef": {"kind": "ClusterRole", "name": "kubevirt.io:view"},
                "subjects": [{"kind": "Group", "name": "viewers"}],
            }
        ]
        path.write_text(yaml.safe_dump(doc))
        time.sleep(1.5)  # the api reads the auth file again within a second
        yield Cluster(up.url, up.http, up.data_dir / "kubeconfig", up.data_dir)


def _running(cluster: Cluster, name: str, tmp: Path) -> None:
    cluster.kubectl("apply", "-f", str(_write(tmp, _vm(name))))
    cluster.kubectl(*START[:2], name, *START[2:])
    until(
        lambda: (
            cluster.kubectl("get", "vmi", name, "-o", "jsonpath={.status.phase}", check=False).out
            == "Running"
        ),
        60,
        f"{name} running",
    )


def _events_of(cluster: Cluster, *selector: str) -> list[list[str]]:
    out = cluster.kubectl("get", "events", "--field-selector", ",".join(selector)).out
    return _rows(out)[1:]


def test_events_are_a_resource_type_kubectl_knows(cluster: Cluster) -> None:
    empty = cluster.kubectl("get", "events", "-n", "nowhere")
    assert empty.err.strip() == "No resources found in nowhere namespace."
    rows = [r for r in _rows(cluster.kubectl("api-resources").out)[1:] if r[0] == "events"]
    assert sorted(r[1:] for r in rows) == [
        ["ev", "events.k8s.io/v1", "true", "Event"],
        ["ev", "v1", "true", "Event"],
    ]


def test_describe_and_get_show_kubevirts_events(cluster: Cluster, tmp_path: Path) -> None:
    _running(cluster, "ev-one", tmp_path)
    _running(cluster, "ev-two", tmp_path)
    vm = cluster.kubectl("describe", "vm", "ev-one").out
    events = vm[vm.index("\nEvents:") :]
    assert "Normal  SuccessfulCreate" in events
    assert "virt-controller  Started the virtual machine by creating the new virtual machine " \
        "instance ev-one" in events  # fmt: skip
    assert "Created virtual machine pod" not in events  # that one is the VMI's
    vmi = cluster.kubectl("describe", "vmi", "ev-one").out
    events = vmi[vmi.index("\nEvents:") :]
    for line in (
        "SuccessfulCreate",
        "Created virtual machine pod virt-launcher-ev-one-",
        "Created           ",
        "VirtualMachineInstance defined.",
        "Started           ",
        "virt-handler     VirtualMachineInstance started.",
    ):
        assert line in events, (line, events)

    mine = _events_of(cluster, "involvedObject.name=ev-one")
    assert {r[3] for r in mine} == {"virtualmachine/ev-one", "virtualmachineinstance/ev-one"}
    assert [r[2] for r in mine if r[3] == "virtualmachineinstance/ev-one"] == [
        "SuccessfulCreate",
        "Created",
        "Started",
    ]
    vm_only = _events_of(
        cluster, "involvedObject.name=ev-two", "involvedObject.kind=VirtualMachine"
    )
    assert [(r[1], r[2], r[3]) for r in vm_only] == [
        ("Normal", "SuccessfulCreate", "virtualmachine/ev-two")
    ]
    # kubectl's own `events` command selects by kind, apiVersion and name
    for_vm = _rows(cluster.kubectl("events", "--for", "vm/ev-two").out)[1:]
    assert [(r[1], r[2], r[3]) for r in for_vm] == [
        ("Normal", "SuccessfulCreate", "VirtualMachine/ev-two")
    ]
    refused = cluster.kubectl(
        "get", "events", "--field-selector", "spec.nodeName=node-1", check=False
    )
    assert (refused.code, refused.err.strip()) == (
        1,
        'Error from server (BadRequest): Unable to find "/v1, Resource=events" that match '
        'label selector "", field selector "spec.nodeName=node-1": field label not supported: '
        '"spec.nodeName"',
    )


def test_get_events_watch_streams_the_stop(cluster: Cluster, tmp_path: Path) -> None:
    _running(cluster, "ev-watch", tmp_path)
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "HOME": str(cluster.home)}
    watch = subprocess.Popen(
        [KUBECTL, "get", "events", "-w", "--field-selector", "involvedObject.name=ev-watch"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert watch.stdout is not None
        lines = [watch.stdout.readline() for _ in range(5)]  # header and the four so far
        assert lines[0].split()[:2] == ["LAST", "SEEN"]
        cluster.kubectl(*STOP[:2], "ev-watch", *STOP[2:])
        shown: list[list[str]] = []
        deadline = time.monotonic() + 60
        while not any(r[1] == "Stopped" for r in shown) and time.monotonic() < deadline:
            shown.append(watch.stdout.readline().split()[1:4])
        # its grace period is 0: the handler signals deletion rather than a shutdown
        assert shown == [
            ["Normal", "SuccessfulDelete", "virtualmachine/ev-watch"],
            ["Normal", "Deleted", "virtualmachineinstance/ev-watch"],
            ["Normal", "Stopped", "virtualmachineinstance/ev-watch"],
        ]
    finally:
        watch.kill()
        watch.communicate()


def test_the_python_client_lists_events_by_field(cluster: Cluster, tmp_path: Path) -> None:
    _running(cluster, "ev-py", tmp_path)
    api = config.new_client_from_config(str(cluster.kubeconfig))
    core = client.CoreV1Api(api)
    vm_uid = cluster.kubectl("get", "vm", "ev-py", "-o", "jsonpath={.metadata.uid}").out
    found = core.list_namespaced_event(
        "default",
        field_selector=f"involvedObject.name=ev-py,involvedObject.namespace=default,"
        f"involvedObject.kind=VirtualMachine,involvedObject.uid={vm_uid}",
    )
    [event] = found.items
    assert event.source is not None and event.involved_object is not None
    assert (event.type, event.reason, event.count) == ("Normal", "SuccessfulCreate", 1)
    assert event.source.component == "virt-controller"
    assert event.involved_object.api_version == "kubevirt.io/v1"
    assert event.first_timestamp is not None and event.last_timestamp is not None
    v1 = client.EventsV1Api(api).list_namespaced_event(
        "default", field_selector="regarding.name=ev-py,reason=Started"
    )
    [started] = v1.items
    assert started.regarding is not None
    assert (started.regarding.kind, started.note) == (
        "VirtualMachineInstance",
        "VirtualMachineInstance started.",
    )
    assert (started.reporting_controller, started.reporting_instance) == ("virt-handler", "node-1")
    # a watch in events.k8s.io/v1 (the client decodes and validates each object)
    stream = watch.Watch().stream(
        client.EventsV1Api(api).list_namespaced_event,
        "default",
        field_selector="regarding.name=ev-py",
        timeout_seconds=2,
    )
    seen = [(e["type"], e["object"].regarding.kind, e["object"].reason) for e in stream]
    assert ("ADDED", "VirtualMachineInstance", "Started") in seen
    assert ("ADDED", "VirtualMachine", "SuccessfulCreate") in seen


def test_events_are_read_only_and_a_viewer_reads_them(cluster: Cluster, tmp_path: Path) -> None:
    event: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "mine", "namespace": "default"},
        "involvedObject": {"kind": "VirtualMachine", "name": "ev-one", "namespace": "default"},
        "reason": "Mine", "message": "written by hand",
    }  # fmt: skip
    path = tmp_path / "event.yaml"
    path.write_text(yaml.safe_dump(event))
    refused: Result = cluster.kubectl("create", "-f", str(path), check=False)
    assert refused.code == 1
    assert "MethodNotAllowed" in refused.err
    listed = cluster.kubectl("--token", VIEWER, "get", "events", check=False)
    assert listed.code == 0, listed.err
    assert (
        cluster.kubectl("--token", VIEWER, "auth", "can-i", "watch", "events").out.strip() == "yes"
    )
    assert (
        cluster.kubectl(
            "--token", VIEWER, "auth", "can-i", "create", "events", check=False
        ).out.strip()
        == "no"
    )
