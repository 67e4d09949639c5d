"""`GET /api/v1/namespaces/{ns}/pods/{name}/log` (`kubectl logs`): a launcher pod's log.
Container `compute` (the default, as KubeVirt's `kubectl.kubernetes.io/default-container`
says) is the launcher's own log, `guest-console-log` the guest's serial console as QEMU
logs it, as KubeVirt's guest-console-log container prints it. Read from the console server
of the VMI's node (mutual TLS, as `streams.py` dials it), which keeps its launchers' logs:
`tailLines` and `limitBytes` are honoured; `follow` answers what is there now. The test
driver's nodes run no console server: their pods' logs are refused in one line."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from litestar import Request, Response, get

from core.errors import bad_request, not_found
from kinds import pod
from projections import launcher_pods
from services.api import streams


def _int(request: Request[Any, Any, Any], name: str) -> int | None:
    text = request.query_params.get(name)
    if text is None or text == "":
        return None
    if not text.lstrip("-").isdigit():
        raise bad_request(f"invalid {name}: {text!r}")
    return int(text)


@get("/api/v1/namespaces/{ns:str}/pods/{name:str}/log", include_in_schema=False, name="pod-log")
async def pod_log(request: Request[Any, Any, Any]) -> Response[bytes]:
    ns, name = request.path_params["ns"], request.path_params["name"]
    api = request.app.state["api"]
    cluster = api.cluster
    try:
        vmi = pod.SPEC.table(cluster)[f"{ns}/{name}"]
    except KeyError:
        raise not_found(pod.SPEC.resource, name) from None
    obj = pod.SPEC.render(cluster, vmi, api.runner.clock())
    containers = [c["name"] for c in obj["spec"]["containers"]]
    container = request.query_params.get("container") or launcher_pods.COMPUTE
    if container not in containers:
        raise bad_request(f"container {container} is not valid for pod {name}")
    node = cluster.nodes.get(vmi.node) if vmi.node else None
    if node is None:
        raise bad_request(
            f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating'
        )
    if not node.console_port:
        raise bad_request(
            f"the logs of pod {name} are kept on node {node.name}, which serves none "
            "(the libvirt test driver's nodes)"
        )
    tail, limit = _int(request, "tailLines"), _int(request, "limitBytes")
    query = urlencode({k: v for k, v in (("tailLines", tail), ("limitBytes", limit)) if v})
    tls = request.app.state.get("console_tls")
    scheme = "https" if tls else "http"
    path = f"/v1/namespaces/{ns}/virtualmachineinstances/{vmi.name}/log/{container}"
    url = f"{scheme}://{node.address or '127.0.0.1'}:{node.console_port}{path}"
    body = await streams.get(streams.Target(f"{url}?{query}" if query else url), tls)
    return Response(body, media_type="text/plain")


ROUTES = [pod_log]
