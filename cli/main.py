"""The `virtstream` command line: virtctl's and kubectl's habits over the HTTP api."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import typer
import yaml
from rich.console import Console

from cli.debug import register as register_debug
from cli.images import app as images_app
from cli.tables import has_table, header_and_rows, render
from cli.up import up
from client.api import DEFAULT_SERVER, ApiError, Client, resource
from events.manifest import ManifestError, yaml_documents
from kinds.registry import REGISTRY

app = typer.Typer(
    help="virtstream: KubeVirt's control plane as event-sourced choreography over NATS JetStream",
    no_args_is_help=True,
)
err = Console(stderr=True, soft_wrap=True)
NS_HELP = "Namespace (default: the global -n, else 'default')"


class Settings:
    """Global options, set by the callback before any command runs."""

    server = os.environ.get("VIRTSTREAM_SERVER", DEFAULT_SERVER)
    namespace = "default"


settings = Settings()


@app.callback()
def main(
    server: str = typer.Option(
        DEFAULT_SERVER, "--server", "-s", envvar="VIRTSTREAM_SERVER", help="The api's URL"
    ),
    namespace: str = typer.Option("default", "--namespace", "-n", help="Namespace"),
) -> None:
    """Global options: --server and -n/--namespace."""
    settings.server = server
    settings.namespace = namespace


app.command()(up)


@contextmanager
def client() -> Iterator[Client]:
    """A client; server errors print as kubectl does and exit 1."""
    c = Client(settings.server, namespace=settings.namespace)
    try:
        yield c
    except ApiError as exc:
        reason = exc.reason or "Unknown"
        err.print(
            f"Error from server ({reason}): {exc.status.message}", markup=False, highlight=False
        )
        raise typer.Exit(1) from None
    except httpx.TransportError as exc:
        err.print(
            f"The connection to the server {settings.server} was refused ({exc})",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(1) from None
    except (ValueError, ManifestError) as exc:
        err.print(f"error: {exc}", markup=False, highlight=False)
        raise typer.Exit(1) from None
    finally:
        c.close()


def _server_error(exc: ApiError) -> None:
    reason = exc.reason or "Unknown"
    err.print(f"Error from server ({reason}): {exc.status.message}", markup=False, highlight=False)


def _ns(namespace: str | None) -> str:
    return namespace or settings.namespace


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


# ------------------------------------------------------------- manifests
def _documents(paths: list[str]) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for p in paths:
        if p == "-":
            docs += yaml_documents(sys.stdin.read())
            continue
        path = Path(p)
        files = (
            sorted(f for f in path.iterdir() if f.suffix in (".yaml", ".yml", ".json"))
            if path.is_dir()
            else [path]
        )
        for f in files:
            docs += yaml_documents(f.read_text())
    return docs


@app.command()
def apply(
    filename: list[str] = typer.Option(..., "--filename", "-f", help="File, directory or -"),
    namespace: str | None = typer.Option(None, "--namespace", "-n", help=NS_HELP),
) -> None:
    """Create or update the objects in the manifests (kubectl: every document is tried,
    errors are printed, the exit code is 1 if any failed)."""
    with client() as c:
        failed = False
        for doc in _documents(filename):
            try:
                existed = _exists(c, doc, namespace)
                c.apply(doc, _ns(namespace), raw=True)
            except ApiError as exc:
                failed = True
                _server_error(exc)
                continue
            _out(f"{_ref(doc)} {'configured' if existed else 'created'}")
        if failed:
            raise typer.Exit(1)


@app.command()
def create(
    filename: list[str] = typer.Option(..., "--filename", "-f", help="File, directory or -"),
    namespace: str | None = typer.Option(None, "--namespace", "-n", help=NS_HELP),
) -> None:
    """Create the objects in the manifests (existing ones are errors)."""
    with client() as c:
        failed = False
        for doc in _documents(filename):
            try:
                c.create(doc, _ns(namespace), raw=True)
            except ApiError as exc:
                failed = True
                _server_error(exc)
                continue
            _out(f"{_ref(doc)} created")
        if failed:
            raise typer.Exit(1)


def _ref(doc: dict[str, Any]) -> str:
    info = resource(str(doc.get("kind", "")))
    name = (doc.get("metadata") or {}).get("name", "")
    return f"{info.singular}.{info.group}/{name}" if info.group else f"{info.singular}/{name}"


def _exists(c: Client, doc: dict[str, Any], namespace: str | None) -> bool:
    name = (doc.get("metadata") or {}).get("name")
    if not name:
        return False
    ns = (doc.get("metadata") or {}).get("namespace") or _ns(namespace)
    try:
        c.get(str(doc.get("kind")), name, ns, raw=True)
    except ApiError as exc:
        if exc.code == 404:
            return False
        raise
    return True


# ------------------------------------------------------------------- get
# what kubectl users type: the plural short name (`vms`), else the plural
KIND_HELP = " | ".join(
    next((n for n in spec.short_names if n.endswith("s")), spec.plural) for spec in REGISTRY
)


@app.command()
def get(
    kind: str = typer.Argument(..., help=KIND_HELP),
    name: str | None = typer.Argument(None),
    namespace: str | None = typer.Option(None, "--namespace", "-n", help=NS_HELP),
    all_namespaces: bool = typer.Option(False, "--all-namespaces", "-A"),
    output: str = typer.Option("", "--output", "-o", help="wide | yaml | json"),
    watch: bool = typer.Option(False, "--watch", "-w"),
    selector: str | None = typer.Option(None, "--selector", "-l", help="Label selector"),
    at: str | None = typer.Option(
        None, "--at", help="As it was at a stream sequence or a time (5m, @epoch, ISO)"
    ),
) -> None:
    """Show objects as a table (or YAML/JSON); -w follows changes; --at travels back."""
    with client() as c:
        info = resource(kind)
        ns_col = all_namespaces and info.namespaced
        if name:
            objs = [c.get(kind, name, _ns(namespace), raw=True, at=at)]
        else:
            objs = c.list(
                kind,
                _ns(namespace),
                all_namespaces=all_namespaces,
                label_selector=selector,
                raw=True,
                at=at,
            )
        _print_objects(info.kind, objs, output, ns_col, single=bool(name))
        if not watch or at:
            return
        field = f"metadata.name={name}" if name else None
        last_rv = None
        for ev_type, obj in c.watch(
            kind,
            _ns(namespace),
            all_namespaces=all_namespaces,
            label_selector=selector,
            field_selector=field,
            resource_version=last_rv,
        ):
            if ev_type == "ERROR":
                err.print(f"error: {obj.get('message')}", markup=False)
                raise typer.Exit(1)
            if output in ("yaml", "json"):
                _print_objects(info.kind, [obj], output, ns_col, single=True)
            else:
                rows = header_and_rows(
                    info.kind, [obj], namespace_column=ns_col, wide=output == "wide"
                )
                _out(render(rows).splitlines()[-1])


def _print_objects(
    kind: str, objs: list[dict[str, Any]], output: str, ns_col: bool, single: bool
) -> None:
    if output == "json":
        body: Any = objs[0] if single else {"apiVersion": "v1", "kind": "List", "items": objs}
        _out(json.dumps(body, indent=2))
    elif output == "yaml":
        body = objs[0] if single else {"apiVersion": "v1", "kind": "List", "items": objs}
        _out(yaml.safe_dump(body, sort_keys=False).rstrip())
    elif not objs:
        where = "" if ns_col else f" in {settings.namespace} namespace"
        err.print(f"No resources found{where}.", markup=False)
    elif has_table(kind):
        _out(render(header_and_rows(kind, objs, namespace_column=ns_col, wide=output == "wide")))


# --------------------------------------------------------------- actions
@app.command()
def delete(
    kind: str,
    name: str,
    namespace: str | None = typer.Option(None, "--namespace", "-n", help=NS_HELP),
    grace_period: int | None = typer.Option(None, "--grace-period"),
) -> None:
    """Delete an object."""
    with client() as c:
        c.delete(kind, name, _ns(namespace), grace_period=grace_period)
        info = resource(kind)
        what = f"{info.singular}.{info.group}" if info.group else info.singular
        _out(f'{what} "{name}" deleted')


def _vm_action(fn: Callable[[Client], Any], message: str) -> None:
    with client() as c:
        fn(c)
        _out(message)


@app.command()
def start(
    name: str,
    paused: bool = typer.Option(False, "--paused"),
    namespace: str | None = typer.Option(None, "--namespace", "-n", help=NS_HELP),
) -> None:
    """Start a VirtualMachine."""
    _vm_action(
        lambda c: c.start(name, _ns(namespace), paused=paused), f"VM {name} was scheduled to start"
    )


@app.command()
def stop(
    name: str,
    grace_period: int | None = typer.Option(None, "--grace-period"),
    namespace: str | None = typer.Option(None, "--namespace", "-n", help=NS_HELP),
) -> None:
    """Stop a VirtualMachine."""
    _vm_action(
        lambda c: c.stop(name, _ns(namespace), grace_period=grace_period),
        f"VM {name} was scheduled to stop",
    )


@app.command()
def restart(
    name: str, namespace: str | None = typer.Option(None, "--namespace", "-n", help=NS_HELP)
) -> None:
    """Restart a VirtualMachine."""
    _vm_action(lambda c: c.restart(name, _ns(namespace)), f"VM {name} was scheduled to restart")


@app.command()
def migrate(
    name: str,
    added_node_selector: list[str] = typer.Option([], "--added-node-selector", help="key=value"),
    namespace: str | None = typer.Option(None, "--namespace", "-n", help=NS_HELP),
) -> None:
    """Live-migrate a VirtualMachine's VMI."""
    selector = dict(s.split("=", 1) for s in added_node_selector if "=" in s)
    _vm_action(
        lambda c: c.migrate(name, _ns(namespace), added_node_selector=selector or None),
        f"VM {name} was scheduled to migrate",
    )


@app.command("migrate-cancel")
def migrate_cancel(
    name: str, namespace: str | None = typer.Option(None, "--namespace", "-n", help=NS_HELP)
) -> None:
    """Cancel the active migration of the VM/VMI NAME (deletes the migration object)."""
    with client() as c:
        active = [
            m
            for m in c.list("vmims", _ns(namespace), raw=True)
            if (m.get("spec") or {}).get("vmiName") == name
            and (m.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        if not active:
            err.print(f"Error: Found no migration to cancel for {name}", markup=False)
            raise typer.Exit(1)
        for m in active:
            c.delete("vmims", m["metadata"]["name"], _ns(namespace))
        _out(f"VM {name} was scheduled to migrate-cancel")


def _pause_target(kind: str) -> None:
    if kind not in ("vm", "vmi"):
        err.print(f'error: unsupported resource type "{kind}": use vm or vmi', markup=False)
        raise typer.Exit(1)


@app.command()
def pause(
    kind: str = typer.Argument(..., help="vm | vmi"),
    name: str = typer.Argument(...),
    namespace: str | None = typer.Option(None, "--namespace", "-n", help=NS_HELP),
) -> None:
    """Pause a VM's (or a VMI's) guest."""
    _pause_target(kind)
    label = "VMI" if kind == "vmi" else "VM"
    _vm_action(lambda c: c.pause(name, _ns(namespace)), f"{label} {name} was scheduled to pause")


@app.command()
def unpause(
    kind: str = typer.Argument(..., help="vm | vmi"),
    name: str = typer.Argument(...),
    namespace: str | None = typer.Option(None, "--namespace", "-n", help=NS_HELP),
) -> None:
    """Unpause a VM's (or a VMI's) guest."""
    _pause_target(kind)
    label = "VMI" if kind == "vmi" else "VM"
    _vm_action(
        lambda c: c.unpause(name, _ns(namespace)), f"{label} {name} was scheduled to unpause"
    )


@app.command()
def softreboot(
    name: str, namespace: str | None = typer.Option(None, "--namespace", "-n", help=NS_HELP)
) -> None:
    """Soft-reboot a VMI (ACPI)."""
    _vm_action(
        lambda c: c.softreboot(name, _ns(namespace)), f"VMI {name} was scheduled to softreboot"
    )


@app.command()
def cordon(node: str) -> None:
    """Mark a node unschedulable."""
    _vm_action(lambda c: c.cordon(node), f"node/{node} cordoned")


@app.command()
def uncordon(node: str) -> None:
    """Mark a node schedulable again (ends a drain)."""
    _vm_action(lambda c: c.uncordon(node), f"node/{node} uncordoned")


@app.command()
def drain(
    node: str,
    no_wait: bool = typer.Option(False, "--no-wait", help="request the drain and return"),
    timeout: float = typer.Option(600.0, "--timeout", help="seconds to follow the drain"),
) -> None:
    """Cordon a node and evacuate its VMIs (per their evictionStrategy); shows the progress
    until the node is empty (exit 1 if only VMIs that cannot move are left, or on timeout)."""
    from cli.drain import drain_progress

    with client() as c:
        c.drain(node)
        if no_wait:
            _out(f"node/{node} drain requested")
            return
        _out(f"node/{node} cordoned, evacuating")
        code = drain_progress(c, node, timeout=timeout, out=_out)
    if code:
        raise typer.Exit(code)


@app.command()
def projections(
    nats_url: str = typer.Option("nats://127.0.0.1:4222", help="NATS server"),
    host: str = typer.Option("127.0.0.1"),
    port: int = typer.Option(8081),
) -> None:
    """Run the read side alone (a read replica: get/list/watch; writes answer 405)."""
    import asyncio

    from services.api.__main__ import serve

    asyncio.run(serve(nats_url, host, port, read_only=True))


register_debug(app)
app.add_typer(images_app, name="images")

if __name__ == "__main__":
    app()
