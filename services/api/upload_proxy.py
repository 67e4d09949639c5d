"""CDI's upload API and upload proxy, served by the api.

- `UploadTokenRequest` (upload.cdi.kubevirt.io/v1beta1, namespaced, create only, kept
  nowhere): the answer carries `status.token`, a grant to upload into the claim
  `spec.pvcName` of that namespace, signed with the cluster's upload key and valid five
  minutes (`core/upload_tokens.py`). RBAC decides who may ask (the edit role may).
- `POST /v1beta1/upload` (synchronous: answered once the claim holds the image) and
  `/v1beta1/upload-async` (answered once the bytes are staged; `HEAD` tells virtctl it is
  there), `Authorization: Bearer <token>`, the body the image (raw, qcow2, anything
  qemu-img reads). The token is the only credential these paths take: the guard lets
  them through to here (as an export's download), and a missing, forged or expired
  token, or one for another claim, is refused before a byte is written.

The bytes are staged whole under the upload directory (the claims' disk directory's
`uploads/<ns>/`, which the nodes' handlers reach) and `UploadReceived` goes to the node
whose handler said `UploadReady`; that handler converts the file into the claim's disk
(services/handler/importer.py). docs/DECISIONS.md says why."""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from pathlib import Path
from typing import Any

import msgspec
from litestar import Request, Response, head, post
from litestar.params import FromPath

from core import upload_tokens
from core.errors import ApiError, bad_request, internal, invalid_request, unavailable
from events.catalog import UploadReady, UploadReceived
from events.meta import Aggregate, ResourceKind
from events.objects import Status
from kinds import storage as storage_kind
from projections import datavolumes as dvs
from projections import storage
from services.api.http_plumbing import correlation_id_of
from services.launcher.storage import staged_upload

JSON = dict[str, Any]
GROUP, VERSION = "upload.cdi.kubevirt.io", "v1beta1"
TOKENS_PATH = f"/apis/{GROUP}/{VERSION}/namespaces/{{namespace:str}}/uploadtokenrequests"
UPLOAD, UPLOAD_ASYNC = f"/{VERSION}/upload", f"/{VERSION}/upload-async"
PATHS = (UPLOAD, UPLOAD_ASYNC)  # what the guard hands to the token check here
CHUNK = 1 << 20
PROCESSING_SECONDS = 600.0  # how long a synchronous upload waits for the conversion
READY_SECONDS = 30.0  # how long an upload waits for its upload server (CDI's proxy waits)
_json = msgspec.json.Encoder()


def upload_key(request: Request[Any, Any, Any]) -> bytes:
    key: bytes | None = request.app.state.get("upload_key")
    if not key:
        raise unavailable("uploads are not enabled on this server (no upload key)")
    return key


@post(TOKENS_PATH, include_in_schema=False, status_code=200)
async def uploadtokenrequests(
    request: Request[Any, Any, Any], namespace: FromPath[str]
) -> Response[bytes]:
    try:
        body = msgspec.json.decode(await request.body())
    except msgspec.DecodeError as e:
        raise bad_request(f"unable to decode the UploadTokenRequest: {e}") from None
    claim = str(((body.get("spec") or {}) if isinstance(body, dict) else {}).get("pvcName") or "")
    if not claim:
        raise invalid_request("spec.pvcName: Required value")
    token = upload_tokens.issue(upload_key(request), namespace, claim, time.time())
    metadata = {**(body.get("metadata") or {}), "namespace": namespace}
    answer = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "UploadTokenRequest",
        "metadata": metadata,
        "spec": {"pvcName": claim},
        "status": {"token": token},
    }
    return Response(_json.encode(answer), media_type="application/json")


def _granted(request: Request[Any, Any, Any]) -> upload_tokens.Grant:
    """The claim the request's token grants; CDI's proxy answers 400 without a bearer
    token and 401 for one that does not verify."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise bad_request("an upload needs an upload token: Authorization: Bearer TOKEN")
    grant = upload_tokens.verify(upload_key(request), token, time.time())
    if grant is None:
        raise ApiError(Status(message="Unauthorized", reason="Unauthorized", code=401))
    return grant


async def _target(request: Request[Any, Any, Any], grant: upload_tokens.Grant) -> tuple[Any, Any]:
    """The upload's target (`kinds/storage.py: upload_target`), waited for a little while
    its upload server gets ready, as CDI's proxy waits."""
    api = request.app.state.api
    deadline = time.monotonic() + READY_SECONDS
    while True:
        try:
            return storage_kind.upload_target(api.cluster, grant.namespace, grant.name)
        except storage_kind.NotReady:
            if time.monotonic() > deadline:
                raise unavailable(storage_kind.not_ready(grant.name)) from None
        await asyncio.sleep(0.25)


async def _upload_node(
    request: Request[Any, Any, Any], grant: upload_tokens.Grant
) -> tuple[str, int]:
    """(the node whose handler said UploadReady, the target's last sequence), from its
    history; refused when its bytes were received already."""
    api = request.app.state.api
    kind, target = await _target(request, grant)
    if api.store is None:
        raise unavailable("this server is a read replica: upload to a writer")
    agg = Aggregate(kind, grant.namespace, grant.name, target.uid)
    node, last = "", 0
    for stored in await api.store.load(agg):
        last = max(last, stored.seq)
        if stored.event.meta.aggregate.uid != target.uid:
            continue
        if isinstance(stored.event, UploadReady):
            node = stored.event.meta.node
        elif isinstance(stored.event, UploadReceived):
            raise unavailable(
                f"rejecting Upload Request for PVC {grant.name}: uploading in progress"
            )
    if not node:
        raise unavailable(storage_kind.not_ready(grant.name))
    return node, last


async def _stage(request: Request[Any, Any, Any], grant: upload_tokens.Grant) -> tuple[Path, int]:
    """The body written whole under the upload directory (a `.part` renamed when
    complete); (its path, its size)."""
    if request.headers.get("content-type", "").startswith("multipart/"):
        raise bad_request("send the image as the request body (multipart forms are not taken)")
    uploads: Path | None = request.app.state.get("upload_dir")
    if uploads is None:
        raise unavailable("uploads are not enabled on this server (no upload directory)")
    name = f"{grant.name}-{secrets.token_hex(6)}.upload"
    target = staged_upload(uploads, grant.namespace, name)
    part = target.with_suffix(".part")
    size = 0
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            async for chunk in request.stream():
                size += len(chunk)
                await asyncio.to_thread(out.write, chunk)
        if not size:
            raise bad_request("the upload is empty: send the image as the request body")
        part.replace(target)
    except OSError as e:
        raise internal(f"unable to stage the upload: {e.strerror or e}") from None
    finally:
        part.unlink(missing_ok=True)
    return target, size


async def _upload(request: Request[Any, Any, Any], wait: bool) -> Response[bytes]:
    grant = _granted(request)
    api = request.app.state.api
    await _upload_node(request, grant)  # refused before a byte is written
    staged, size = await _stage(request, grant)
    try:
        node, last = await _upload_node(request, grant)  # again: another may have won
        decide = lambda cluster, ctx: storage_kind.upload_received(  # noqa: E731
            grant.namespace, grant.name, node, staged.name, size, last, cluster, ctx
        )
        await api.execute(decide, correlation_id_of(request))
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    if wait:
        await _processed(request, grant)
    return Response(b"", status_code=200)


def _outcome(request: Request[Any, Any, Any], grant: upload_tokens.Grant) -> str | None:
    """ "" once the claim holds the image, its failure's message, None while processing:
    the upload DataVolume's phase, or a bare claim's pod phase annotation."""
    cluster = request.app.state.api.cluster
    k = f"{grant.namespace}/{grant.name}"
    claim = cluster.resources[ResourceKind.PVC].get(k)
    if claim is None:
        return "the claim is gone"
    notes = storage.annotations_of(claim)
    dv = cluster.resources[ResourceKind.DATA_VOLUME].get(k)
    if dv is not None and notes.get(dvs.CREATED_FOR) == dv.uid:
        status: JSON = dv.status
        if status.get("phase") == dvs.SUCCEEDED:
            return ""
        if status.get("phase") != dvs.FAILED:
            return None
        conditions = status.get("conditions") or []
        running: JSON = next((c for c in conditions if c.get("type") == "Running"), {})
        return str(running.get("message") or "the DataVolume failed")
    phase = notes.get(dvs.POD_PHASE)
    if phase == "Succeeded":
        return ""
    return str(notes.get(dvs.RUNNING_MESSAGE) or "failed") if phase == "Failed" else None


async def _processed(request: Request[Any, Any, Any], grant: upload_tokens.Grant) -> None:
    """A synchronous upload's answer waits for the claim to hold the image or its
    failure, as CDI's upload server answers after processing."""
    deadline = time.monotonic() + PROCESSING_SECONDS
    while time.monotonic() < deadline:
        outcome = _outcome(request, grant)
        if outcome == "":
            return
        if outcome is not None:
            raise internal(f"Upload into {grant.name} failed: {outcome}")
        await asyncio.sleep(0.25)
    raise unavailable(f"the upload into {grant.name} is still being processed")


@post(UPLOAD, include_in_schema=False, status_code=200, request_max_body_size=None)
async def upload(request: Request[Any, Any, Any]) -> Response[bytes]:
    return await _upload(request, wait=True)


@post(UPLOAD_ASYNC, include_in_schema=False, status_code=200, request_max_body_size=None)
async def upload_async(request: Request[Any, Any, Any]) -> Response[bytes]:
    return await _upload(request, wait=False)


@head(UPLOAD_ASYNC, include_in_schema=False, status_code=200)
async def upload_async_probe(request: Request[Any, Any, Any]) -> Response[None]:
    """virtctl asks whether the asynchronous path exists (with its token)."""
    _granted(request)
    return Response(None, status_code=200)


ROUTES = [uploadtokenrequests, upload, upload_async, upload_async_probe]
