"""VirtualMachineExport downloads: the api is KubeVirt's export server and its proxy
(the links an export's status names, `projections/exports.py`).

`GET <base>/volumes/<volume>/disk.img` (raw) and `disk.img.gz` (gzip) stream a volume's
disk image, converted from its qcow2 with `qemu-img convert`; `<base>/{internal,external}/
manifests/all` answers the source VM as a v1 List, `.../manifests/secret` the Secret with
the header a CDI import sends. Every request needs the export's token (header or query
parameter `x-kubevirt-export-token`, as KubeVirt's server), compared in constant time with
the token Secret's `token`; the guard lets these paths through without RBAC for that
reason (`services/api/guard.py`). Disk images exist in qemu mode only (`--disk-dir`)."""

from __future__ import annotations

import asyncio
import base64
import hmac
import shutil
import tempfile
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
from litestar import Request, Response, get
from litestar.params import FromPath
from litestar.response import Stream

from events.meta import ResourceKind
from events.objects import Status
from projections.cluster import key
from projections.exports import (
    GROUP_VERSION,
    TOKEN_HEADER,
    exported,
    secret_name,
    source_vm_spec,
)
from projections.views import ResourceView

PREFIX = f"/api/{GROUP_VERSION}/"
BASE = PREFIX + "namespaces/{namespace:str}/virtualmachineexports/{name:str}"
CHUNK = 1 << 20
RAW, GZIP = "application/octet-stream", "application/gzip"
_json = msgspec.json.Encoder()


def _status(code: int, reason: str, message: str) -> Response[bytes]:
    body = _json.encode(msgspec.to_builtins(Status(message=message, reason=reason, code=code)))
    return Response(body, status_code=code, media_type="application/json")


def _export(request: Request[Any, Any, Any], namespace: str, name: str) -> Any:
    """The export and the cluster, or the answer that refuses the request."""
    cluster = request.app.state.api.cluster
    export: ResourceView | None = cluster.resources[ResourceKind.EXPORT].get(key(namespace, name))
    if export is None or export.status.get("phase") != "Ready":
        return None, None, _status(404, "NotFound", f"export {namespace}/{name} is not ready")
    secret = cluster.resources[ResourceKind.SECRET].get(key(namespace, secret_name(export)))
    expected = b""
    if secret is not None:
        try:
            expected = base64.b64decode(str((secret.manifest.get("data") or {}).get("token", "")))
        except ValueError:
            expected = b""
    given = (
        request.headers.get(TOKEN_HEADER) or request.query_params.get(TOKEN_HEADER) or ""
    ).encode()
    if not expected or not hmac.compare_digest(given, expected):
        return None, None, _status(401, "Unauthorized", "Unauthorized")
    return cluster, export, None


async def _converted(src: Path) -> tuple[Path, Path]:
    """The qcow2 as a raw image in a scratch dir (removed once streamed)."""
    scratch = Path(tempfile.mkdtemp(prefix="vs-export-"))
    out = scratch / "disk.img"
    proc = await asyncio.create_subprocess_exec(
        "qemu-img", "convert", "-O", "raw", str(src), str(out),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await proc.communicate()
    if proc.returncode != 0:
        shutil.rmtree(scratch, ignore_errors=True)
        raise RuntimeError(err.decode(errors="replace").strip() or "qemu-img convert failed")
    return scratch, out


async def _chunks(scratch: Path, path: Path, gzip: bool) -> AsyncIterator[bytes]:
    packer = zlib.compressobj(6, zlib.DEFLATED, 31) if gzip else None  # 31: a gzip stream
    try:
        with path.open("rb") as f:
            while chunk := await asyncio.to_thread(f.read, CHUNK):
                yield packer.compress(chunk) if packer else chunk
        if packer:
            yield packer.flush()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


async def _disk(request: Request[Any, Any, Any], namespace: str, name: str, volume: str,
                gzip: bool) -> Any:  # fmt: skip
    cluster, export, refused = _export(request, namespace, name)
    if refused is not None:
        return refused
    found = next((v for v in exported(cluster, export) or [] if v.name == volume), None)
    disk_dir: Path | None = request.app.state.get("disk_dir")
    if found is None:
        return _status(404, "NotFound", f"volume {volume} is not exported by {name}")
    src = disk_dir / found.area / namespace / f"{found.file}.qcow2" if disk_dir else None
    if src is None or not src.exists():
        return _status(404, "NotFound", f"volume {volume} has no disk image (qemu mode only)")
    try:
        scratch, raw = await _converted(src)
    except RuntimeError as e:
        return _status(500, "InternalError", f"volume {volume}: {e}")
    media = GZIP if gzip else RAW
    return Stream(_chunks(scratch, raw, gzip), media_type=media)


@get(BASE + "/volumes/{volume:str}/disk.img", include_in_schema=False, media_type=RAW)
async def raw_disk(request: Request[Any, Any, Any], namespace: FromPath[str],
                   name: FromPath[str], volume: FromPath[str]) -> Any:  # fmt: skip
    return await _disk(request, namespace, name, volume, False)


@get(BASE + "/volumes/{volume:str}/disk.img.gz", include_in_schema=False, media_type=GZIP)
async def gzip_disk(request: Request[Any, Any, Any], namespace: FromPath[str],
                    name: FromPath[str], volume: FromPath[str]) -> Any:  # fmt: skip
    return await _disk(request, namespace, name, volume, True)


def _yaml_json(obj: Any) -> Response[bytes]:
    return Response(_json.encode(obj), media_type="application/json")


@get(BASE + "/{where:str}/manifests/all", include_in_schema=False)
async def manifests_all(request: Request[Any, Any, Any], namespace: FromPath[str],
                        name: FromPath[str], where: FromPath[str]) -> Any:  # fmt: skip
    cluster, export, refused = _export(request, namespace, name)
    if refused is not None:
        return refused
    items: list[Any] = []
    vm = source_vm_spec(cluster, export)
    if vm is not None:
        meta = vm.get("metadata") or {}
        items.append(
            {
                "apiVersion": "kubevirt.io/v1",
                "kind": "VirtualMachine",
                "metadata": {
                    k: meta[k]
                    for k in ("name", "namespace", "labels", "annotations")
                    if meta.get(k)
                },
                "spec": vm.get("spec") or {},
            }
        )
    return _yaml_json({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items})


@get(BASE + "/{where:str}/manifests/secret", include_in_schema=False)
async def manifests_secret(request: Request[Any, Any, Any], namespace: FromPath[str],
                           name: FromPath[str], where: FromPath[str]) -> Any:  # fmt: skip
    _, export, refused = _export(request, namespace, name)
    if refused is not None:
        return refused
    given = request.headers.get(TOKEN_HEADER) or request.query_params.get(TOKEN_HEADER) or ""
    header = f"{TOKEN_HEADER}:{given}"
    return _yaml_json(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"header-secret-{export.name}", "namespace": namespace},
            "type": "Opaque",
            "data": {"token": base64.b64encode(header.encode()).decode()},
        }
    )


ROUTES = [raw_disk, gzip_disk, manifests_all, manifests_secret]
