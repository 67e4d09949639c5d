"""Launcher pods, Services and Endpoints on the api's projection (no store): a VMI's life
seen as its `virt-launcher-<name>-xxxxx` pod (KubeVirt's labels, phase, conditions,
containers), the pods' field selectors and watch, a Service's defaults and node port, and
its Endpoints derived from the pods it selects. Given a log, when it is folded, then the
api serves these."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from litestar.testing import TestClient

from cli.tables import header_and_rows
from events.catalog import (
    DomainStarted,
    DomainStopped,
    Event,
    LauncherStarted,
    PodScheduled,
    ResourceCreated,
    StopReason,
    Unschedulable,
    VMICreated,
)
from events.envelope import Stored
from events.meta import Kind
from kinds.registry import REGISTRY
from projections import launcher_pods
from readside.runner import ProjectionRunner
from services.api import table
from services.api.app import create_app
from services.api.service import ApiService
from tests.factories import meta, vmi_manifest

T0 = 1_700_000_000.0
UID = "vmi-uid-vm1"
POD = launcher_pods.pod_name("vm1", UID)


class Log:
    def __init__(self) -> None:
        self.runner = ProjectionRunner(cast(Any, None), clock=lambda: T0 + 100)
        self.seq = 0

    def __call__(self, *events: Event) -> Log:
        for ev in events:
            self.seq += 1
            self.runner.fold(Stored(seq=self.seq, subject="s", time=T0 + self.seq, event=ev))
        return self


def _m(kind: str = Kind.VMI, name: str = "vm1", node: str = "") -> Any:
    m = meta(kind, name, node=node, at=T0)
    return type(m)(**{**{f: getattr(m, f) for f in m.__struct_fields__},
                     "aggregate": type(m.aggregate)(kind=kind, namespace="default",
                                                    name=name, uid=UID if kind == Kind.VMI
                                                    else f"uid-{name}")})  # fmt: skip


def created(name: str = "vm1", labels: dict[str, str] | None = None) -> Event:
    manifest = vmi_manifest(name, labels=labels or {"app": name})
    manifest["metadata"]["uid"] = UID
    return VMICreated(meta=_m(name=name), manifest=manifest)


def scheduled(address: str = "10.244.1.2") -> Event:
    return PodScheduled(
        meta=_m(node="node-1"), node="node-1", pod_name=POD, pod_uid="pod-uid-1",
        manifest=vmi_manifest("vm1"), pod_address=address,
    )  # fmt: skip


def running() -> list[Event]:
    return [
        LauncherStarted(meta=_m(node="node-1"), pid=10, node="node-1", pod_uid="pod-uid-1"),
        DomainStarted(meta=_m(node="node-1"), node="node-1", domain="default_vm1"),
    ]


def _get(http: TestClient[Any], path: str, **params: str) -> Any:
    r = http.get(path, params=params)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture
def log() -> Log:
    return Log()


def test_a_running_vmi_is_a_running_launcher_pod_with_kubevirt_labels(log: Log) -> None:
    log(created(labels={"app": "web", "kubevirt.io/domain": "vm1"}), scheduled(), *running())
    with TestClient(app=create_app(ApiService(log.runner, None))) as http:
        pod = _get(http, f"/api/v1/namespaces/default/pods/{POD}")
    assert pod["metadata"]["name"].startswith("virt-launcher-vm1-")
    assert len(pod["metadata"]["name"]) == len("virt-launcher-vm1-") + 5
    labels = pod["metadata"]["labels"]
    assert labels["kubevirt.io"] == "virt-launcher"
    assert labels["kubevirt.io/created-by"] == UID
    assert labels["vm.kubevirt.io/name"] == "vm1"
    assert labels["vmi.kubevirt.io/id"] == "vm1"
    assert labels["app"] == "web" and labels["kubevirt.io/domain"] == "vm1"
    annotations = pod["metadata"]["annotations"]
    assert annotations["kubevirt.io/domain"] == "vm1"
    assert annotations["kubectl.kubernetes.io/default-container"] == "compute"
    owner = pod["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "VirtualMachineInstance", "vm1", UID, True,
    )  # fmt: skip
    assert pod["spec"]["nodeName"] == "node-1"
    assert [c["name"] for c in pod["spec"]["containers"]] == ["compute", "guest-console-log"]
    assert pod["status"]["phase"] == "Running"
    conditions = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    for ctype in ("PodScheduled", "Initialized", "ContainersReady", "Ready"):
        assert conditions[ctype] == "True", ctype
    assert pod["metadata"]["uid"] == launcher_pods.launcher_uid(UID, POD)  # for its whole life
    # its IP is the pod network's from its scheduling, before any guest agent reports one
    assert pod["status"]["podIP"] == "10.244.1.2"
    assert pod["status"]["podIPs"] == [{"ip": "10.244.1.2"}]


def test_the_pod_phase_follows_the_vmi(log: Log) -> None:
    log(created())
    spec = REGISTRY.resource("pods")
    vmi = log.runner.cluster.vmis["default/vm1"]

    uids = set()

    def phase() -> str:
        pod = spec.render(log.runner.cluster, log.runner.cluster.vmis["default/vm1"], T0)
        uids.add((pod["metadata"]["name"], pod["metadata"]["uid"]))
        return str(pod["status"]["phase"])

    assert phase() == "Pending"
    log(Unschedulable(meta=_m(), reason="Unschedulable", message="0/1 nodes are available"))
    pod = spec.render(log.runner.cluster, log.runner.cluster.vmis["default/vm1"], T0)
    cond = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    log(scheduled(), *running())
    assert phase() == "Running"
    log(DomainStopped(meta=_m(node="node-1"), reason=StopReason.SHUTDOWN))
    assert phase() == "Succeeded"
    assert vmi.uid == UID
    assert len(uids) == 1  # one pod, one name and uid, through the VMI's life


def test_pods_field_selectors_as_kubectl_describe_node_sends_them(log: Log) -> None:
    log(created(), scheduled(), *running())
    log(VMICreated(meta=_m(name="vm2"), manifest=vmi_manifest("vm2")))  # pending, no node
    selector = "spec.nodeName=node-1,status.phase!=Failed,status.phase!=Succeeded"
    with TestClient(app=create_app(ApiService(log.runner, None))) as http:
        on_node = _get(http, "/api/v1/pods", fieldSelector=selector, limit="500")
        every = _get(http, "/api/v1/namespaces/default/pods")
        pending = _get(http, "/api/v1/pods", fieldSelector="status.phase=Pending")
        labelled = _get(http, "/api/v1/pods", labelSelector="kubevirt.io=virt-launcher,app=vm2")
        wrong = http.get("/api/v1/pods", params={"fieldSelector": "spec.bogus=x"})
        vmis = _get(http, "/apis/kubevirt.io/v1/virtualmachineinstances")
    assert [p["metadata"]["name"] for p in on_node["items"]] == [POD]
    assert on_node["kind"] == "PodList"
    assert len(every["items"]) == 2
    assert [p["metadata"]["labels"]["vm.kubevirt.io/name"] for p in pending["items"]] == ["vm2"]
    assert len(labelled["items"]) == 1
    assert wrong.status_code == 400 and "field label not supported" in wrong.text
    assert len(vmis["items"]) == 2  # the VMIs are still VMIs


def test_pods_are_read_only(log: Log) -> None:
    log(created())
    with TestClient(app=create_app(ApiService(log.runner, None))) as http:
        r = http.delete(f"/api/v1/namespaces/default/pods/{POD}")
        missing = http.get("/api/v1/namespaces/default/pods/virt-launcher-vm1-xxxxx")
    assert r.status_code == 405
    assert missing.status_code == 404
    assert missing.json()["message"] == 'pods "virt-launcher-vm1-xxxxx" not found'


def test_the_pod_table_has_the_api_servers_columns(log: Log) -> None:
    log(created(), scheduled(), *running())
    spec = REGISTRY.resource("pods")
    pod = spec.render(log.runner.cluster, log.runner.cluster.vmis["default/vm1"], T0)
    doc = table.table(table.columns(spec), [pod], "1", T0 + 65)
    names = [c["name"] for c in doc["columnDefinitions"]]
    assert names == ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node",
                     "Nominated Node", "Readiness Gates"]  # fmt: skip
    assert doc["rows"][0]["cells"][:4] == [POD, "2/2", "Running", "0"]
    assert doc["rows"][0]["cells"][6] == "node-1"
    # `virtstream get pods` prints the same columns
    lines = header_and_rows("pods", [pod], wide=True, now=T0 + 65)
    assert lines[0] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    assert lines[1][:4] == [POD, "2/2", "Running", "0"] and lines[1][6] == "node-1"


def test_a_pod_watch_follows_its_vmi(log: Log) -> None:
    log(created())
    spec = REGISTRY.resource("pods")
    from readside.watch import Selector

    watcher = log.runner.watch(
        Selector.parse(Kind.VMI, "default", None, "spec.nodeName=node-1", spec.field_labels),
        None,
        spec.convert,
    )
    log(scheduled(), *running())
    seen = []
    while not watcher.queue.empty():
        item = watcher.queue.get_nowait()
        assert item is not None
        seen.append((item["type"], item["object"]["kind"], item["object"]["status"]["phase"]))
    assert seen[0] == ("ADDED", "Pod", "Pending")
    assert seen[-1] == ("MODIFIED", "Pod", "Running")


# -------------------------------------------------------------------- services
def _service(name: str = "ssh", **spec: Any) -> Event:
    manifest = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": spec,
    }  # fmt: skip
    return ResourceCreated(meta=_m("service", name), manifest=manifest)


def test_endpoints_are_the_pods_a_service_selects(log: Log) -> None:
    log(created(labels={"app": "web"}), scheduled("10.244.1.7"), *running())
    log(_service(selector={"vmi.kubevirt.io/id": "vm1"}, ports=[{"port": 22, "targetPort": 22}]))
    log(_service("other", selector={"app": "nothing"}, ports=[{"port": 80}]))
    with TestClient(app=create_app(ApiService(log.runner, None))) as http:
        ep = _get(http, "/api/v1/namespaces/default/endpoints/ssh")
        none = _get(http, "/api/v1/namespaces/default/endpoints/other")
        listed = _get(http, "/api/v1/endpoints")
    subset = ep["subsets"][0]
    assert subset["addresses"][0]["ip"] == "10.244.1.7"
    assert subset["addresses"][0]["targetRef"]["name"] == POD
    assert subset["addresses"][0]["nodeName"] == "node-1"
    assert subset["ports"] == [{"port": 22, "protocol": "TCP"}]
    assert "subsets" not in none
    assert len(listed["items"]) == 2


def test_a_service_is_defaulted_and_a_node_port_allocated() -> None:
    from core import commands
    from core.commands import Request, Verb
    from core.context import RequestContext
    from core.errors import ApiError
    from tests.factories import with_namespaces

    cluster = with_namespaces()
    seq = [0]

    def run(body: Any) -> Any:
        req = Request(verb=Verb.CREATE, spec=REGISTRY.resource("services"),
                      namespace="default", body=json.dumps(body).encode())  # fmt: skip
        ctx = RequestContext(now=T0, correlation_id="c", new_id=lambda: f"{seq[0]:032x}",
                             suffix=lambda: "abcde")  # fmt: skip
        out = commands.decide(commands.decode(req), cluster, ctx, REGISTRY.updatable)
        for a in out.appends:
            seq[0] += 1
            cluster.apply(Stored(seq=seq[0] + 10, subject="", time=T0, event=a.event))
        return out

    def svc(name: str, **spec: Any) -> Any:
        return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec}

    run(svc("a", type="NodePort", selector={"x": "y"}, ports=[{"port": 22}]))
    a = REGISTRY.resource("svc").render(cluster, cluster.resources["service"]["default/a"], T0)
    port = a["spec"]["ports"][0]
    assert 30000 <= port["nodePort"] <= 32767
    assert (port["protocol"], port["targetPort"]) == ("TCP", 22)
    assert a["spec"]["clusterIP"].startswith("10.")
    assert a["spec"]["type"] == "NodePort"
    with pytest.raises(ApiError) as taken:
        run(svc("b", type="NodePort", ports=[{"port": 22, "nodePort": port["nodePort"]}]))
    assert taken.value.code == 422
    assert taken.value.status.message == (
        f'Service "b" is invalid: spec.ports[0].nodePort: Invalid value: {port["nodePort"]}: '
        "provided port is already allocated"
    )
    with pytest.raises(ApiError) as no_ports:
        run(svc("c"))
    assert no_ports.value.status.message == 'Service "c" is invalid: spec.ports: Required value'


# ------------------------------------------------------------------ node ports
def _free_node_port() -> int:
    import socket

    for port in range(31000, 32767):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free node port")


async def test_node_ports_follow_the_services_and_close_without_an_endpoint(log: Log) -> None:
    import asyncio

    from services.api.node_ports import NodePorts

    port = _free_node_port()
    ports = NodePorts(log.runner, "127.0.0.1")
    await ports.start()
    try:
        log(_service("ssh", type="NodePort", selector={"app": "none"},
                     ports=[{"port": 22, "targetPort": 22, "nodePort": port}]))  # fmt: skip
        for _ in range(50):
            if port in ports.listeners:
                break
            await asyncio.sleep(0.02)
        assert ports.listeners[port].service == "default/ssh"
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(reader.read(), 5) == b""  # no guest: closed at once
        writer.close()
        from events.catalog import ResourceDeleted

        log(ResourceDeleted(meta=_m("service", "ssh")))
        for _ in range(50):
            if port not in ports.listeners:
                break
            await asyncio.sleep(0.02)
        assert port not in ports.listeners
        try:
            await asyncio.open_connection("127.0.0.1", port)
            raise AssertionError("the node port is still served")
        except OSError:
            pass
    finally:
        await ports.stop()
    assert not ports.listeners
