"""The `virtstream` command line: virtctl's and kubectl's habits over the HTTP api.

Every failure a user can cause ends in one line on stderr and a non-zero exit: the api's
`Error from server (Reason): message`, or `error: what went wrong (what to do)`. `run` is
the entry point; anything unexpected is one line too unless `--debug` asks for the
traceback."""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import typer
import yaml
from rich.console import Console

from cli import verbs
from cli.debug import register as register_debug
from cli.expose import register as register_expose
from cli.guest_io import register as register_guest_io
from cli.help import use_plain_help
from cli.image_upload import register as register_image_upload
from cli.images import app as images_app
from cli.port_forward import register as register_port_forward
from cli.serve import SETTINGS as SERVE_SETTINGS
from cli.serve import serve
from cli.settings import DEFAULT_SERVER, settings
from cli.tables import WatchPrinter, has_table, header_and_rows, render
from cli.ui import ui
from cli.up import up
from cli.whatif import register as register_whatif
from client.api import ApiError, ApplyOptions, Client, resource
from events.manifest import ManifestError, yaml_documents
from kinds.registry import REGISTRY

# help as plain text at the terminal's width (120 when not a terminal), not a boxed table
use_plain_help()
CONTEXT = {
    "max_content_width": 120,
    "terminal_width": shutil.get_terminal_size((120, 24)).columns,
}
app = typer.Typer(
    help="virtstream: KubeVirt's control plane as event-sourced choreography over NATS JetStream",
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings=CONTEXT,
)
err = Console(stderr=True, soft_wrap=True, highlight=False)
NS_HELP = "Namespace (default: the global -n, else 'default')"
GRACE_HELP = "Seconds the guest gets to shut down before it is killed (0: at once)"


@app.callback()
def main(
    ctx: typer.Context,
    server: str = typer.Option(
        DEFAULT_SERVER,
        "--server",
        "-s",
        envvar="VIRTSTREAM_SERVER",
        metavar="URL",
        help="The api's URL",
    ),
    namespace: str = typer.Option("default", "--namespace", "-n", metavar="NS", help="Namespace"),
    debug: bool = typer.Option(
        False, "--debug", envvar="VIRTSTREAM_DEBUG", help="Show the traceback of a failure"
    ),
) -> None:
    """Global options: --server, -n/--namespace and --debug."""
    settings.server = server
    source = ctx.get_parameter_source("server")
    settings.server_given = source is not None and source.name != "DEFAULT"
    settings.namespace = namespace
    settings.debug = debug


app.command(context_settings=CONTEXT)(up)
app.command(context_settings={**CONTEXT, **SERVE_SETTINGS})(serve)


def error(message: str) -> typer.Exit:
    """Print `error: message` and return the exit to raise (code 1)."""
    err.print(f"error: {message}", markup=False)
    return typer.Exit(1)


def _warn(text: str) -> None:
    err.print(f"Warning: {text}", markup=False)


def _unreachable(exc: Exception) -> str:
    if "CERTIFICATE_VERIFY_FAILED" in str(exc):
        return (
            f"The server {settings.server} presented a certificate not signed by a CA this "
            "client trusts: set VIRTSTREAM_CA (the CA file), or VIRTSTREAM_KUBECONFIG (the "
            "kubeconfig `virtstream up` wrote)"
        )
    return (
        f"The connection to the server {settings.server} was refused ({exc}): "
        "is `virtstream up` running? (another api: --server or VIRTSTREAM_SERVER)"
    )


@contextmanager
def client() -> Iterator[Client]:
    """A client; server errors print as kubectl does and exit 1."""
    c = Client(settings.server, namespace=settings.namespace, on_warning=_warn)
    try:
        yield c
    except ApiError as exc:
        _server_error(exc)
        raise typer.Exit(1) from None
    except httpx.TransportError as exc:
        err.print(_unreachable(exc), markup=False)
        raise typer.Exit(1) from None
    except (ValueError, ManifestError) as exc:
        raise error(str(exc)) from None
    finally:
        c.close()


def _server_error(exc: ApiError) -> None:
    if exc.code == 401:  # kubectl's words, and where credentials come from
        err.print(
            f"error: You must be logged in to the server (Unauthorized): no valid credentials "
            f"for {settings.server} (found in the data dir of `virtstream up`, "
            "VIRTSTREAM_KUBECONFIG or VIRTSTREAM_TOKEN)",
            markup=False,
        )
        return
    reason = exc.reason or "Unknown"
    err.print(f"Error from server ({reason}): {exc.status.message}", markup=False)


def _ns(namespace: str | None) -> str:
    return namespace or settings.namespace


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


# ------------------------------------------------------------- manifests
JSON = dict[str, Any]
# a kind whose objects name others of the same apply goes after them (a migration after
# the VMI it moves), so a folder of manifests applies in one go
_AFTER_THE_REST = ("VirtualMachineInstanceMigration",)


def _parse(source: str, text: str) -> list[JSON]:
    try:
        return yaml_documents(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise error(f"error parsing {source}: {exc.problem or exc.context}{where}") from None
    except (yaml.YAMLError, ManifestError) as exc:
        raise error(f"error parsing {source}: {exc}") from None


def _documents(paths: list[str], verb: str) -> list[tuple[str, JSON]]:
    """(source, document) of every manifest, checked before anything is sent (kubectl
    refuses the whole batch for an unreadable file or a document without a kind)."""
    docs: list[tuple[str, JSON]] = []
    for p in paths:
        if p == "-":
            docs += [("STDIN", d) for d in _parse("STDIN", sys.stdin.read())]
            continue
        path = Path(p)
        if not path.exists():
            raise error(f'the path "{p}" does not exist')
        files = (
            sorted(f for f in path.iterdir() if f.suffix in (".yaml", ".yml", ".json"))
            if path.is_dir()
            else [path]
        )
        for f in files:
            try:
                text = f.read_text()
            except (OSError, UnicodeDecodeError) as exc:
                raise error(f"cannot read {f}: {exc}") from None
            docs += [(str(f), d) for d in _parse(str(f), text)]
    if not docs:
        raise error(f"no objects passed to {verb} (the files hold no manifest)")
    for source, doc in docs:
        if not doc.get("kind"):
            raise error(
                f'error validating "{source}": kind not set '
                "(every manifest needs apiVersion and kind, e.g. kind: VirtualMachine)"
            )
    return sorted(docs, key=lambda d: d[1].get("kind") in _AFTER_THE_REST)


VALIDATE = {"strict": "Strict", "true": "Strict", "warn": "Warn", "ignore": "Ignore"}
VALIDATE_HELP = "Fields the api does not know: strict (refuse), warn (the default) or ignore"


def _validation(validate: str) -> str:
    mode = VALIDATE.get(validate.lower())
    if mode is None:
        raise error(f'--validate must be strict, warn or ignore, not "{validate}"')
    return mode


def _rv(obj: JSON | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("resourceVersion", ""))


@app.command()
def apply(
    filename: list[str] = typer.Option(
        ..., "--filename", "-f", metavar="PATH", help="File, directory or -"
    ),
    namespace: str | None = typer.Option(None, "--namespace", "-n", metavar="NS", help=NS_HELP),
    validate: str = typer.Option("warn", "--validate", metavar="MODE", help=VALIDATE_HELP),
    timeout: float = typer.Option(
        60.0,
        "--timeout",
        metavar="SECONDS",
        help="How long a migration waits for its VMI to be Running (0: no wait)",
    ),
    server_side: bool = typer.Option(
        False, "--server-side", help="Server-side apply: the api merges and tracks field owners"
    ),
    field_manager: str = typer.Option(
        "", "--field-manager", help="Who owns the applied fields (server-side: virtstream)"
    ),
    force_conflicts: bool = typer.Option(
        False, "--force-conflicts", help="Server-side: take the fields other managers own"
    ),
) -> None:
    """Create or update the objects in the manifests as kubectl apply does: a three-way
    merge with the configuration last applied (kept in the
    kubectl.kubernetes.io/last-applied-configuration annotation), so fields the manifest
    does not name are left as others set them; or server-side apply. Every document is
    tried, errors are printed, the exit code is 1 if any failed."""
    if force_conflicts and not server_side:
        raise error("--force-conflicts only works with --server-side")
    how = ApplyOptions(server_side=server_side, field_manager=field_manager or None)
    if force_conflicts:
        how["force"] = True
    _apply_documents(_documents(filename, "apply"), namespace, _validation(validate), timeout, how)


def _apply_documents(
    docs: list[tuple[str, JSON]],
    namespace: str | None,
    mode: str,
    timeout: float,
    how: ApplyOptions | None = None,
) -> None:
    how = how or ApplyOptions()
    with client() as c:
        failed = False
        for source, doc in docs:
            try:
                current = _current(c, doc, namespace)
                if current is None and doc.get("kind") in _AFTER_THE_REST:
                    _wait_for_vmi(c, doc, namespace, timeout)
                opts: ApplyOptions = {**how, "raw": True, "field_validation": mode}
                obj = c.apply(doc, _ns(namespace), **opts)
            except ApiError as exc:
                failed = True
                _server_error(exc)
                continue
            except ValueError as exc:
                failed = True
                err.print(f"error: {source}: {exc}", markup=False)
                continue
            if how.get("server_side"):
                action = "serverside-applied"
            elif current is None:
                action = "created"
            elif _rv(obj) == _rv(current):
                action = "unchanged"
            else:
                action = "configured"
            _out(f"{_ref(doc)} {action}")
        if failed:
            raise typer.Exit(1)


@app.command()
def create(
    what: str | None = typer.Argument(
        None,
        metavar="[vm|namespace]",
        help="`vm`: write a VirtualMachine manifest from flags; `namespace NAME`: create one",
    ),
    object_name: str | None = typer.Argument(None, metavar="[NAME]", help="namespace: its name"),
    filename: list[str] = typer.Option(
        [], "--filename", "-f", metavar="PATH", help="File, directory or -"
    ),
    namespace: str | None = typer.Option(None, "--namespace", "-n", metavar="NS", help=NS_HELP),
    validate: str = typer.Option("warn", "--validate", metavar="MODE", help=VALIDATE_HELP),
    name: str | None = typer.Option(None, "--name", help="vm: the VM's name"),
    instancetype: str | None = typer.Option(
        None, "--instancetype", metavar="[KIND/]NAME", help="vm: its instance type"
    ),
    preference: str | None = typer.Option(
        None, "--preference", metavar="[KIND/]NAME", help="vm: its preference"
    ),
    containerdisk: list[str] = typer.Option(
        [], "--volume-containerdisk", metavar="src:IMAGE[,name:N]", help="vm: a containerDisk"
    ),
    run_strategy: str = typer.Option("Always", "--run-strategy", help="vm: its runStrategy"),
    ssh_key: list[str] = typer.Option(
        [], "--ssh-key", metavar="KEY", help="vm: a public key cloud-init authorizes (repeatable)"
    ),
    apply_it: bool = typer.Option(False, "--apply", help="vm: create it instead of printing"),
) -> None:
    """Create the objects in the manifests (existing ones are errors); `create vm` writes a
    VirtualMachine manifest as `virtctl create vm` does (or creates it with --apply);
    `create namespace NAME` (`ns`) creates a namespace, as kubectl's does."""
    if what in ("namespace", "ns"):
        _create_namespace(object_name)
        return
    if object_name is not None:
        raise error(f"unexpected argument {object_name!r}: only `create namespace` takes a NAME")
    if what is not None:
        _create_vm(
            what, name, instancetype, preference, containerdisk, run_strategy, ssh_key, apply_it
        )
        return
    if not filename:
        raise error("one of -f/--filename or `vm` is required")
    mode = _validation(validate)
    docs = _documents(filename, "create")
    with client() as c:
        failed = False
        for source, doc in docs:
            try:
                c.create(doc, _ns(namespace), raw=True, field_validation=mode)
            except ApiError as exc:
                failed = True
                _server_error(exc)
                continue
            except ValueError as exc:
                failed = True
                err.print(f"error: {source}: {exc}", markup=False)
                continue
            _out(f"{_ref(doc)} created")
        if failed:
            raise typer.Exit(1)


def _create_namespace(name: str | None) -> None:
    if not name:
        raise error("create namespace needs a NAME, e.g. create namespace dev")
    doc: JSON = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    with client() as c:
        c.create(doc, None, raw=True)
    _out(f"namespace/{name} created")


def _ref(doc: JSON) -> str:
    info = resource(str(doc.get("kind", "")))
    name = (doc.get("metadata") or {}).get("name", "")
    return f"{info.singular}.{info.group}/{name}" if info.group else f"{info.singular}/{name}"


def _current(c: Client, doc: JSON, namespace: str | None) -> JSON | None:
    name = (doc.get("metadata") or {}).get("name")
    resource(str(doc.get("kind")))  # an unknown kind fails here, for this document only
    if not name:
        return None
    ns = (doc.get("metadata") or {}).get("namespace") or _ns(namespace)
    try:
        found: JSON = c.get(str(doc.get("kind")), name, ns, raw=True)
    except ApiError as exc:
        if exc.code == 404:
            return None
        raise
    return found


def _wait_for_vmi(c: Client, doc: JSON, namespace: str | None, timeout: float) -> None:
    """A migration is refused unless its VMI runs: wait for a VMI that exists (one this
    apply just created, say) to get there."""
    vmi = str((doc.get("spec") or {}).get("vmiName") or "")
    ns = (doc.get("metadata") or {}).get("namespace") or _ns(namespace)
    deadline = time.monotonic() + timeout
    said = False
    while vmi and time.monotonic() < deadline:
        try:
            phase = (c.get("vmi", vmi, ns, raw=True).get("status") or {}).get("phase")
        except ApiError:
            return  # no such VMI: the api says so
        if phase in ("Running", "Succeeded", "Failed"):
            return
        if not said:
            _out(f"waiting for virtualmachineinstance.kubevirt.io/{vmi} to be Running")
            said = True
        time.sleep(0.25)


# ------------------------------------------------------------------- get
KIND_HELP = " | ".join(REGISTRY.cli_names)


@app.command()
def get(
    kind: str = typer.Argument(..., metavar="KIND", help=KIND_HELP),
    name: str | None = typer.Argument(None, metavar="[NAME]"),
    namespace: str | None = typer.Option(None, "--namespace", "-n", metavar="NS", help=NS_HELP),
    all_namespaces: bool = typer.Option(
        False, "--all-namespaces", "-A", help="Objects of every namespace"
    ),
    output: str = typer.Option("", "--output", "-o", metavar="FORMAT", help="wide | yaml | json"),
    watch: bool = typer.Option(False, "--watch", "-w", help="After the list, print each change"),
    selector: str | None = typer.Option(
        None, "--selector", "-l", metavar="SELECTOR", help="Label selector"
    ),
    at: str | None = typer.Option(
        None,
        "--at",
        metavar="POINT",
        help="As it was at a stream sequence or a time (5m ago, @EPOCH, ISO)",
    ),
) -> None:
    """Show objects as a table (or YAML/JSON); -w follows changes; --at travels back."""
    if "/" in kind and name is None:  # kubectl's TYPE/NAME
        kind, name = kind.split("/", 1)
    with client() as c:
        info = resource(kind)
        ns_col = all_namespaces and info.namespaced
        if at:  # as it was then, ages too
            objs, then = c.read_at(
                kind, name, _ns(namespace), all_namespaces=all_namespaces,
                label_selector=selector, at=at,
            )  # fmt: skip
            _print_objects(info.kind, objs, output, ns_col, single=bool(name), now=then)
            return
        if name:
            objs = [c.get(kind, name, _ns(namespace), raw=True)]
            list_rv = _rv(objs[0])
        elif watch:
            objs, list_rv = c.list_with_version(
                kind, _ns(namespace), all_namespaces=all_namespaces, label_selector=selector
            )
        else:
            objs = c.list(
                kind,
                _ns(namespace),
                all_namespaces=all_namespaces,
                label_selector=selector,
                raw=True,
            )
            list_rv = ""
        if not watch:
            _print_objects(info.kind, objs, output, ns_col, single=bool(name))
            return
        _watch(c, info.kind, kind, name, namespace, all_namespaces, selector, output, objs, list_rv)


def _watch(
    c: Client,
    kind_name: str,
    kind: str,
    name: str | None,
    namespace: str | None,
    all_namespaces: bool,
    selector: str | None,
    output: str,
    objs: list[JSON],
    list_rv: str,
) -> None:
    """kubectl's list-then-watch: the list, then one row per change after it (from the
    list's resourceVersion, so nothing twice), in the list's columns."""
    ns_col = all_namespaces and REGISTRY.resource(kind).namespaced
    table = output not in ("yaml", "json")
    printer = WatchPrinter(kind_name, namespace_column=ns_col, wide=output == "wide", out=_out)
    if table:
        printer.start(objs)
    else:
        for obj in objs:
            _print_objects(kind_name, [obj], output, ns_col, single=True)
    field = f"metadata.name={name}" if name else None
    for ev_type, obj in c.watch(
        kind,
        _ns(namespace),
        all_namespaces=all_namespaces,
        label_selector=selector,
        field_selector=field,
        resource_version=list_rv or None,
    ):
        if ev_type == "ERROR":
            raise error(f"the watch ended: {obj.get('message')} (run the command again)")
        if table:
            printer.row(obj, deleted=ev_type == "DELETED")
        else:
            _print_objects(kind_name, [obj], output, ns_col, single=True)


def _print_objects(
    kind: str, objs: list[JSON], output: str, ns_col: bool, single: bool, now: float | None = None
) -> None:
    """`now`: the time ages are counted to (the clock when None; a time travel's point)."""
    if output == "json":
        body: Any = objs[0] if single else {"apiVersion": "v1", "kind": "List", "items": objs}
        _out(json.dumps(body, indent=2))
    elif output == "yaml":
        body = objs[0] if single else {"apiVersion": "v1", "kind": "List", "items": objs}
        _out(yaml.safe_dump(body, sort_keys=False).rstrip())
    elif output not in ("", "wide"):
        raise error(f'unable to match a printer for output format "{output}": use wide, yaml, json')
    elif not objs:
        where = "" if ns_col else f" in {settings.namespace} namespace"
        err.print(f"No resources found{where}.", markup=False)
    elif has_table(kind):
        rows = header_and_rows(kind, objs, namespace_column=ns_col, wide=output == "wide", now=now)
        _out(render(rows))


# --------------------------------------------------------------- actions
TARGET_HELP = "NAME, or KIND NAME / KIND/NAME"


@app.command()
def delete(
    kind: str = typer.Argument(..., metavar="KIND", help=f"{KIND_HELP} (or KIND/NAME)"),
    name: str | None = typer.Argument(None, metavar="[NAME]"),
    namespace: str | None = typer.Option(None, "--namespace", "-n", metavar="NS", help=NS_HELP),
    grace_period: int | None = typer.Option(
        None, "--grace-period", metavar="SECONDS", help=GRACE_HELP
    ),
) -> None:
    """Delete an object."""
    if "/" in kind and name is None:
        kind, name = kind.split("/", 1)
    if not name:
        raise error("delete needs KIND NAME (or KIND/NAME), e.g. delete vm vm-cirros")
    with client() as c:
        c.delete(kind, name, _ns(namespace), grace_period=grace_period)
        info = resource(kind)
        what = f"{info.singular}.{info.group}" if info.group else info.singular
        _out(f'{what} "{name}" deleted')


def _action(fn: Callable[[Client], Any], message: str) -> None:
    with client() as c:
        fn(c)
        _out(message)


def _target(verb: str, first: str, second: str | None) -> verbs.Target:
    try:
        return verbs.target(verb, first, second)
    except ValueError as exc:
        raise error(str(exc)) from None


First = typer.Argument(..., metavar="[KIND] NAME", help=TARGET_HELP)
Second = typer.Argument(None, hidden=True)
Namespace = typer.Option(None, "--namespace", "-n", metavar="NS", help=NS_HELP)


@app.command()
def start(
    first: str = First,
    second: str | None = Second,
    paused: bool = typer.Option(False, "--paused", help="Start with the guest paused"),
    namespace: str | None = Namespace,
) -> None:
    """Start a VirtualMachine."""
    t = _target("start", first, second)
    _action(lambda c: c.start(t.name, _ns(namespace), paused=paused), t.says("scheduled to start"))


@app.command()
def scale(
    kind: str = typer.Argument(..., metavar="KIND", help="vmirs or vmpool (or any of their names)"),
    name: str = typer.Argument(..., metavar="NAME"),
    replicas: int = typer.Option(..., "--replicas", min=0, help="The new number of replicas"),
    namespace: str | None = Namespace,
) -> None:
    """Set the replicas of a VirtualMachineInstanceReplicaSet or VirtualMachinePool."""
    spec = REGISTRY.get(kind)
    if spec is None:
        raise error(f'the server doesn\'t have a resource type "{kind}"')
    if spec.subresource("scale") is None:
        raise error(f"{spec.plural}.{spec.group} cannot be scaled")
    _action(
        lambda c: c.scale(spec.kind, name, replicas, _ns(namespace)),
        f"{spec.singular}.{spec.group}/{name} scaled",
    )


@app.command()
def stop(
    first: str = First,
    second: str | None = Second,
    grace_period: int | None = typer.Option(
        None, "--grace-period", metavar="SECONDS", help=GRACE_HELP
    ),
    namespace: str | None = Namespace,
) -> None:
    """Stop a VirtualMachine."""
    t = _target("stop", first, second)
    _action(
        lambda c: c.stop(t.name, _ns(namespace), grace_period=grace_period),
        t.says("scheduled to stop"),
    )


@app.command()
def restart(
    first: str = First, second: str | None = Second, namespace: str | None = Namespace
) -> None:
    """Restart a VirtualMachine."""
    t = _target("restart", first, second)
    _action(lambda c: c.restart(t.name, _ns(namespace)), t.says("scheduled to restart"))


@app.command()
def migrate(
    first: str = First,
    second: str | None = Second,
    added_node_selector: list[str] = typer.Option(
        [], "--added-node-selector", metavar="KEY=VALUE", help="Extra node selector term"
    ),
    namespace: str | None = Namespace,
) -> None:
    """Live-migrate a VirtualMachine's VMI."""
    t = _target("migrate", first, second)
    selector = dict(s.split("=", 1) for s in added_node_selector if "=" in s)
    _action(
        lambda c: c.migrate(t.name, _ns(namespace), added_node_selector=selector or None),
        t.says("scheduled to migrate"),
    )


@app.command("migrate-cancel")
def migrate_cancel(
    first: str = First, second: str | None = Second, namespace: str | None = Namespace
) -> None:
    """Cancel the active migration of a VM/VMI (deletes the migration object)."""
    name = _target("migrate-cancel", first, second).name
    with client() as c:
        active = [
            m
            for m in c.list("vmims", _ns(namespace), raw=True)
            if (m.get("spec") or {}).get("vmiName") == name
            and (m.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        if not active:
            raise error(f"found no migration to cancel for {name}")
        for m in active:
            c.delete("vmims", m["metadata"]["name"], _ns(namespace))
        _out(f"VM {name} was scheduled to migrate-cancel")


def _guest_verb(verb: str, summary: str) -> None:
    """pause, unpause, softreboot: the same shape, one subresource call each."""

    def command(
        first: str = First, second: str | None = Second, namespace: str | None = Namespace
    ) -> None:
        t = _target(verb, first, second)
        _action(lambda c: getattr(c, verb)(t.name, _ns(namespace)), t.says(f"scheduled to {verb}"))

    command.__doc__ = summary
    app.command(name=verb)(command)


_guest_verb("pause", "Pause a VM's (or a VMI's) guest.")
_guest_verb("unpause", "Unpause a VM's (or a VMI's) guest.")
_guest_verb("softreboot", "Soft-reboot a VMI's guest (ACPI).")


@app.command()
def addvolume(
    vmi: str = typer.Argument(..., metavar="VMI", help="the running VMI"),
    volume_name: str = typer.Option(
        ..., "--volume-name", help="the PersistentVolumeClaim (or DataVolume) to hot-plug"
    ),
    disk_type: str = typer.Option("disk", "--disk-type", help="disk or lun"),
    bus: str = typer.Option("scsi", "--bus", help="scsi or virtio (a lun: scsi)"),
    serial: str = typer.Option("", "--serial", help="the disk's serial (default: its name)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="check only, change nothing"),
    namespace: str | None = Namespace,
) -> None:
    """Hot-plug a volume into a running VMI (virtctl addvolume)."""
    if disk_type == "disk" and bus not in ("scsi", "virtio"):
        raise error(f"Invalid bus type '{bus}' for disk. Only 'scsi' and 'virtio' are supported.")
    if disk_type == "lun" and bus != "scsi":
        raise error(f"Invalid bus type '{bus}' for LUN disk. Only 'scsi' bus is supported.")
    if disk_type not in ("disk", "lun"):
        raise error(f"Invalid disk type '{disk_type}'. Only LUN and Disk are supported.")
    options = {
        "name": volume_name,
        "disk": {disk_type: {"bus": bus}, "serial": serial or volume_name},
        "volumeSource": {"persistentVolumeClaim": {"claimName": volume_name, "hotpluggable": True}},
        **({"dryRun": ["All"]} if dry_run else {}),
    }
    _action(
        lambda c: c.add_volume(vmi, options, _ns(namespace)),
        f"Successfully submitted add volume request to VM {vmi} for volume {volume_name}",
    )


@app.command()
def removevolume(
    vmi: str = typer.Argument(..., metavar="VMI", help="the running VMI"),
    volume_name: str = typer.Option(..., "--volume-name", help="the hot-plugged volume"),
    namespace: str | None = Namespace,
) -> None:
    """Unplug a hot-plugged volume from a running VMI (virtctl removevolume)."""
    _action(
        lambda c: c.remove_volume(vmi, volume_name, _ns(namespace)),
        f"Successfully submitted remove volume request to VM {vmi} for volume {volume_name}",
    )


def _agent_verb(verb: str, what: str, summary: str) -> None:
    """guestosinfo, userlist, fslist: virtctl's guest agent reports, as JSON."""

    def command(
        vmi: str = typer.Argument(..., metavar="VMI", help="the running VMI"),
        namespace: str | None = Namespace,
    ) -> None:
        with client() as c:
            _out(json.dumps(c.guest_agent(vmi, what, _ns(namespace)), indent=2))

    command.__doc__ = summary
    app.command(name=verb)(command)


_agent_verb("guestosinfo", "guestosinfo", "What the VMI's guest agent says of its guest OS.")
_agent_verb("userlist", "userlist", "The users logged in to the VMI's guest (its guest agent).")
_agent_verb("fslist", "filesystemlist", "The VMI's guest's file systems (its guest agent).")


NodeArg = typer.Argument(..., metavar="NODE", help="NODE or node/NODE")


@app.command()
def cordon(node: str = NodeArg) -> None:
    """Mark a node unschedulable."""
    name = _target("cordon", node, None).name
    _action(lambda c: c.cordon(name), f"node/{name} cordoned")


@app.command()
def uncordon(node: str = NodeArg) -> None:
    """Mark a node schedulable again (ends a drain)."""
    name = _target("uncordon", node, None).name
    _action(lambda c: c.uncordon(name), f"node/{name} uncordoned")


@app.command()
def drain(
    node: str = NodeArg,
    no_wait: bool = typer.Option(False, "--no-wait", help="Request the drain and return"),
    timeout: float = typer.Option(
        600.0, "--timeout", metavar="SECONDS", help="How long to follow the drain"
    ),
) -> None:
    """Cordon a node and evacuate its VMIs (per their evictionStrategy); shows the progress
    until the node is empty (exit 1 if only VMIs that cannot move are left, or on timeout)."""
    from cli.drain import drain_progress

    name = _target("drain", node, None).name
    with client() as c:
        before = [] if no_wait else c.list("vmi", all_namespaces=True, raw=True)
        c.drain(name)
        if no_wait:
            _out(f"node/{name} drain requested")
            return
        _out(f"node/{name} cordoned, evacuating")
        code = drain_progress(c, name, timeout=timeout, out=_out, before=before)
    if code:
        raise typer.Exit(code)


@app.command()
def projections(
    nats_url: str = typer.Option(
        "nats://127.0.0.1:4222", metavar="URL", help="NATS server with the event stream"
    ),
    host: str = typer.Option("127.0.0.1", metavar="HOST", help="Address to listen on"),
    port: int = typer.Option(8081, metavar="PORT", help="Port to listen on"),
) -> None:
    """Run the read side alone (a read replica: get/list/watch; writes answer 405). Next to a
    secured `virtstream up`, it serves with the same auth file and TLS certificate, and
    reads NATS as the api's user."""
    import asyncio

    from client import credentials
    from services.api.__main__ import serve
    from services.api.server import Tls

    data_dir = credentials.nats_data_dir(nats_url)
    auth_file = tls = None
    if data_dir is not None and (data_dir / "auth.yaml").exists():
        auth_file = data_dir / "auth.yaml"
        pki = data_dir / "pki"
        tls = Tls(pki / "server.crt", pki / "server.key", pki / "ca.crt")
    nats = credentials.nats_auth(nats_url, "api")
    asyncio.run(
        serve(nats_url, host, port, read_only=True, auth_file=auth_file, tls=tls, nats_options=nats)
    )


def _create_vm(
    what: str,
    name: str | None,
    instancetype: str | None,
    preference: str | None,
    containerdisk: list[str],
    run_strategy: str,
    ssh_keys: list[str],
    apply_it: bool,
) -> None:
    from cli.create_vm import vm_manifest

    if what != "vm":
        raise error(f"unknown object {what!r}: only `create vm` writes a manifest")
    if not name:
        raise error("create vm needs --name")
    try:
        doc = vm_manifest(
            name,
            instancetype=instancetype,
            preference=preference,
            containerdisks=containerdisk,
            run_strategy=run_strategy,
            ssh_keys=[k.strip() for k in ssh_keys if k.strip()],
        )
    except ValueError as exc:
        raise error(str(exc)) from None
    if apply_it:
        _apply_documents([("create vm", doc)], None, "Strict", 0.0)
    else:
        _out(yaml.safe_dump(doc, sort_keys=False).rstrip())


instancetypes_app = typer.Typer(
    help="KubeVirt's common instance types and preferences", no_args_is_help=True
)


@instancetypes_app.command("install")
def instancetypes_install() -> None:
    """Create or update the u1/o1/cx1/m1/n1 instance types and the common OS preferences
    (cluster-wide), as KubeVirt's common-instancetypes bundle."""
    bundled = Path(__file__).resolve().parents[1] / "kinds" / "bundled"
    paths = [str(bundled / "instancetypes.yaml"), str(bundled / "preferences.yaml")]
    _apply_documents(_documents(paths, "apply"), None, "Strict", 0.0)


register_debug(app)
register_guest_io(app)
register_port_forward(app)
register_expose(app, client, error)
register_image_upload(app, client, error)
register_whatif(app)
app.command(context_settings=CONTEXT)(ui)
app.add_typer(images_app, name="images")
app.add_typer(instancetypes_app, name="instancetypes")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, httpx.TransportError):
        return _unreachable(exc)
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def run() -> None:
    """The `virtstream` command. A failure no command handled is one line (and exit 1)
    unless --debug (or VIRTSTREAM_DEBUG) asks for the traceback."""
    try:
        app()
    except Exception as exc:
        if settings.debug or "--debug" in sys.argv[1:]:
            raise
        err.print(f"error: {_describe(exc)} (--debug shows the traceback)", markup=False)
        sys.exit(1)


if __name__ == "__main__":
    run()
