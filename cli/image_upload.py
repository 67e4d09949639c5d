"""`virtstream image-upload dv NAME --size=1Gi --image-path=FILE [--storage-class SC]
[--access-mode MODE] [--volume-mode block|filesystem] [--no-create] [--insecure]
[--uploadproxy-url URL] [--wait-secs N]` (and `pvc NAME`): virtctl's image-upload. It
makes the DataVolume with an upload source (`pvc`: the claim with CDI's upload target
annotation), or with `--no-create` takes the existing one, waits for its upload server
(phase UploadReady; a claim's `cdi.kubevirt.io/storage.pod.ready`), asks an
UploadTokenRequest for the claim, sends the image to the upload proxy (the api's
`/v1beta1/upload-async`, or `--uploadproxy-url`) with a progress line, and waits for it
to succeed. Any failure is one line and exit 1."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import typer

from cli.settings import settings
from client.api import ApiError, Client
from client.credentials import for_api
from projections import datavolumes as dvs

JSON = dict[str, Any]
CHUNK = 1 << 20
POLL = 0.5
ASYNC_PATH, SYNC_PATH = "/v1beta1/upload-async", "/v1beta1/upload"


class UploadError(ValueError):
    pass


def datavolume(name: str, namespace: str, size: str, storage_class: str, access_mode: str,
               volume_mode: str) -> JSON:  # fmt: skip
    """The DataVolume virtctl creates: an upload source, `spec.storage` of the size."""
    if access_mode == "ReadOnlyMany":
        raise UploadError(
            "cannot upload to a readonly volume, use either ReadWriteOnce or ReadWriteMany "
            "if supported"
        )
    storage: JSON = {"resources": {"requests": {"storage": size}}}
    if storage_class:
        storage["storageClassName"] = storage_class
    if access_mode:
        storage["accessModes"] = [access_mode]
    if volume_mode.lower() in ("block", "filesystem"):
        storage["volumeMode"] = volume_mode.capitalize()
    return {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"source": {"upload": {}}, "contentType": "kubevirt", "storage": storage},
    }


def claim(name: str, namespace: str, size: str, storage_class: str, access_mode: str,
          volume_mode: str) -> JSON:  # fmt: skip
    """The claim virtctl creates for `image-upload pvc`: CDI's upload target annotation,
    the DataVolume's storage as its spec (ReadWriteOnce when unsaid)."""
    spec = datavolume(name, namespace, size, storage_class, access_mode, volume_mode)["spec"]
    body = dict(spec["storage"])
    body.setdefault("accessModes", ["ReadWriteOnce"])
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {dvs.UPLOAD_TARGET: ""},
        },
        "spec": body,
    }


def _dv_failed(dv: JSON) -> str:
    status = dv.get("status") or {}
    if status.get("phase") != dvs.FAILED:
        return ""
    conditions = status.get("conditions") or []
    running: JSON = next((c for c in conditions if c.get("type") == "Running"), {})
    return str(running.get("message") or "the DataVolume failed")


def _notes(obj: JSON) -> JSON:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def _claim_failed(pvc: JSON) -> str:
    notes = _notes(pvc)
    if notes.get(dvs.POD_PHASE) != "Failed":
        return ""
    return str(notes.get(dvs.RUNNING_MESSAGE) or "the upload failed")


def _phase(phase: str) -> Callable[[JSON], bool]:
    return lambda dv: (dv.get("status") or {}).get("phase") == phase


@dataclass(frozen=True)
class Target:
    """What an upload goes into, and how its progress reads: a DataVolume's phase, or a
    bare claim's CDI annotations."""

    short: str
    kind: str
    resource: str
    ready: Callable[[JSON], bool]
    done: Callable[[JSON], bool]
    failed: Callable[[JSON], str]


TARGETS = {
    "dv": Target(
        "dv", "DataVolume", "datavolumes.cdi.kubevirt.io",
        _phase(dvs.UPLOAD_READY), _phase(dvs.SUCCEEDED), _dv_failed,
    ),
    "pvc": Target(
        "pvc", "PersistentVolumeClaim", "persistentvolumeclaims",
        lambda pvc: _notes(pvc).get(dvs.POD_READY) == "true",
        lambda pvc: _notes(pvc).get(dvs.POD_PHASE) == "Succeeded", _claim_failed,
    ),
}  # fmt: skip


def _wait(
    c: Client, t: Target, name: str, namespace: str, seconds: float,
    done: Callable[[JSON], bool], say: Callable[[str], None], waiting: str,
) -> JSON:  # fmt: skip
    """Poll the target until `done`; its failure or the deadline end the wait."""
    deadline = time.monotonic() + seconds
    logged = False
    while True:
        try:
            obj: JSON = c.get(t.short, name, namespace, raw=True)
        except ApiError as e:
            if e.code != 404:
                raise
            obj = {}
        if obj and done(obj):
            return obj
        if obj and (why := t.failed(obj)):
            raise UploadError(f"{t.kind} {namespace}/{name} failed: {why}")
        if not logged and waiting:
            say(waiting)
            logged = True
        if time.monotonic() > deadline:
            raise UploadError(f"timed out waiting for {t.kind} {namespace}/{name}")
        time.sleep(POLL)


def existing(c: Client, t: Target, name: str, namespace: str) -> JSON | None:
    """The DataVolume or claim to upload into when it exists (refused when it cannot take
    one, in virtctl's words)."""
    try:
        obj: JSON = c.get(t.short, name, namespace, raw=True)
    except ApiError as e:
        if e.code == 404:
            return None
        raise
    if t.short == "dv":
        takes = "upload" in ((obj.get("spec") or {}).get("source") or {})
    else:
        takes = dvs.UPLOAD_TARGET in _notes(obj)
    if not takes:
        raise UploadError(f"PVC {namespace}/{name} not available for upload")
    if t.done(obj):
        raise UploadError(f"PVC {name} already successfully uploaded")
    return obj


def _message(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        body = None
    text = body.get("message") if isinstance(body, dict) else resp.text
    return f"{resp.status_code} {text or resp.reason_phrase}".strip()


def _chunks(path: Path, total: int, progress: Callable[[int, int], None]) -> Iterator[bytes]:
    sent = 0
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            sent += len(chunk)
            progress(sent, total)
            yield chunk


def _progress(sent: int, total: int) -> None:
    percent = 100.0 * sent / total if total else 100.0
    sys.stdout.write(f"\r{sent} / {total} bytes [{percent:5.1f}%]")
    if sent >= total:
        sys.stdout.write("\n")
    sys.stdout.flush()


def send(proxy: str, upload_token: str, image: Path, insecure: bool) -> None:
    """POST the image to the proxy's asynchronous path (the synchronous one when the
    proxy does not answer the asynchronous one's probe), as virtctl does."""
    verify: Any = False if insecure else for_api(proxy).verify()
    headers = {"Authorization": f"Bearer {upload_token}"}
    base = proxy.rstrip("/")
    if "://" not in base:
        base = f"https://{base}"
    total = image.stat().st_size
    with httpx.Client(verify=verify, timeout=httpx.Timeout(30.0, read=None)) as http:
        probe = http.head(f"{base}{ASYNC_PATH}", headers=headers)
        path = ASYNC_PATH if probe.status_code == 200 else SYNC_PATH
        headers["Content-Type"] = "application/octet-stream"
        headers["Content-Length"] = str(total)
        resp = http.post(f"{base}{path}", headers=headers, content=_chunks(image, total, _progress))
    if resp.status_code != 200:
        raise UploadError(f"unexpected return value {_message(resp)}")


def register(
    app: typer.Typer,
    client: Callable[[], AbstractContextManager[Client]],
    error: Callable[[str], typer.Exit],
) -> None:
    @app.command("image-upload", context_settings={"help_option_names": ["-h", "--help"]})
    def image_upload(
        kind: str = typer.Argument(..., metavar="TYPE", help="dv (or pvc)"),
        name: str = typer.Argument(..., metavar="NAME"),
        image_path: str = typer.Option("", "--image-path", help="Path to the local VM image."),
        size: str = typer.Option(
            "", "--size", help="The size of the DataVolume/PVC to create (ex. 10Gi, 500Mi)."
        ),
        storage_class: str = typer.Option(
            "", "--storage-class", help="The storage class for the PVC."
        ),
        access_mode: str = typer.Option(
            "", "--access-mode", help="The access mode for the PVC (e.g., ReadWriteOnce)."
        ),
        volume_mode: str = typer.Option(
            "", "--volume-mode", help="The VolumeMode (block/filesystem) of the PVC."
        ),
        no_create: bool = typer.Option(
            False, "--no-create", help="Don't attempt to create a new DataVolume/PVC."
        ),
        insecure: bool = typer.Option(
            False, "--insecure", help="Allow insecure server connections when using HTTPS."
        ),
        uploadproxy_url: str = typer.Option(
            "", "--uploadproxy-url", help="The URL of the cdi-upload proxy service."
        ),
        wait_secs: int = typer.Option(
            300, "--wait-secs", help="Seconds to wait for upload pod to start."
        ),
        namespace: str | None = typer.Option(None, "--namespace", "-n", help="Namespace"),
    ) -> None:
        """Upload a VM image to a DataVolume/PersistentVolumeClaim."""
        ns = namespace or settings.namespace
        say = typer.echo
        t = TARGETS.get(kind.lower())
        if t is None:
            raise error(f"invalid resource type {kind}")
        image = Path(image_path)
        if not image_path or not image.is_file():
            raise error(f"failed to open image file: {image_path or '--image-path is required'}")
        with client() as c:
            try:
                found = existing(c, t, name, ns)
                if found is None:
                    if no_create:
                        raise UploadError(f'{t.resource} "{name}" not found')
                    if not size:
                        raise UploadError(f"when creating a {t.kind}, --size must be given")
                    if storage_class:
                        c.get("sc", storage_class, raw=True)
                    make = datavolume if t.short == "dv" else claim
                    body = make(name, ns, size, storage_class, access_mode, volume_mode)
                    c.create(body, ns, raw=True)
                    say(f"{t.kind} {ns}/{name} created")
                else:
                    say(f"Using existing PVC {ns}/{name}")
                waiting = f"Waiting for PVC {name} upload pod to be ready..."
                _wait(c, t, name, ns, wait_secs, t.ready, say, waiting)
                say("Pod now ready")
                proxy = uploadproxy_url or str(c.http.base_url).rstrip("/")  # the api, as found
                say(f"Uploading data to {proxy}")
                send(proxy, c.upload_token(name, ns), image, insecure)
                say(
                    "Uploading data completed successfully, waiting for processing to "
                    "complete, you can hit ctrl-c without interrupting the progress"
                )
                _wait(c, t, name, ns, wait_secs, t.done, say, "")
                say("Processing completed successfully")
                say(f"Uploading {image_path} completed successfully")
            except (UploadError, OSError) as e:
                raise error(str(e)) from None
            except httpx.TransportError as e:
                raise error(f"unable to reach the upload proxy: {e}") from None
