"""NATS users with least-privilege permissions, as data: `users(...)` builds them, and
`authorization_block(...)` renders nats-server's `authorization { users = [...] }`.

One user per service (docs/SECURITY.md has the table and how to use it in a real install):
- `api`: appends any event (it is where intents become events), serves the NATS intents
  (`virt-api.>`, answering any requester), owns the streams, the snapshot bucket and the
  idempotency keys' bucket;
- `upkeep`: the debugging index, the archive's creation, the hot log's floor and its
  purges; no event, no intent;
- `controller`: appends any event; its consumer, the dead-letter subject, heartbeats read,
  the active/standby lease;
- `handler-<node>`: appends only VMI events routed to its node, its node's own events,
  migration events (a migration's handoff is routed to the other node) and the answers to
  the volume copies, imports and volume deletions routed to it; its heartbeat
  key, its dead-letter subject, its durable consumer's acks; no intent;
- `shadow`: a shadow controller: reads the log and the live controller's checkpoint,
  writes its latest divergences' bucket; no event, no intent;
- `reader`: the read-only debug commands: stream info, ordered consumers, message gets;
  publishes no event and no intent;
- `scripts`: what `reader` may, plus the NATS intents (`virt-api.>`; scripts go through
  the api's checks like any client) and plain subscriptions to events;
- `admin`: everything (operators, the nats CLI).

Every user but `scripts` and `admin` has its own inbox prefix (`_INBOX_<user>.`), so no
service reads another's replies. Users not listed cannot connect: nats-server refuses a
connection without valid credentials once any user is configured."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable

import msgspec

from events.subjects import token
from eventstore import archive, checkpoints, heartbeats, index, keyed, lease, shadows

JS = "$JS.API"
# what no service needs: removing streams, messages or other services' consumers
JS_DESTRUCTIVE = (
    f"{JS}.STREAM.DELETE.>",
    f"{JS}.STREAM.PURGE.>",
    f"{JS}.STREAM.MSG.DELETE.>",
    f"{JS}.STREAM.UPDATE.>",
    f"{JS}.STREAM.SNAPSHOT.>",
    f"{JS}.STREAM.RESTORE.>",
    f"{JS}.ACCOUNT.PURGE.>",
)
# reading the stream: info, ordered (ephemeral) consumers, single messages, flow control
JS_READ = (
    f"{JS}.INFO",
    f"{JS}.STREAM.INFO.>",
    f"{JS}.STREAM.NAMES",
    f"{JS}.STREAM.LIST",
    f"{JS}.STREAM.MSG.GET.>",
    f"{JS}.DIRECT.GET.>",
    f"{JS}.CONSUMER.CREATE.>",
    f"{JS}.CONSUMER.INFO.>",
    f"{JS}.CONSUMER.DELETE.>",
    "$JS.FC.>",
)
INTENTS = "virt-api.>"


class Permissions(msgspec.Struct, frozen=True):
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()


class NatsUser(msgspec.Struct, frozen=True):
    name: str
    password: str
    publish: Permissions
    subscribe: Permissions
    allow_responses: bool = False

    @property
    def inbox_prefix(self) -> str:
        return f"_INBOX_{self.name}"


def _own_inbox(name: str) -> str:
    return f"_INBOX_{name}.>"


def own_checkpoint(name: str) -> tuple[str, str]:
    """Writing one's own checkpoint (`eventstore/checkpoints.py`): its head and chunks."""
    return f"$KV.{checkpoints.BUCKET}.{name}", f"$KV.{checkpoints.BUCKET}.{name}.>"


def api_user(password: str, stream: str = "VIRT") -> NatsUser:
    return NatsUser(
        "api",
        password,
        Permissions(
            (
                "virt.>",
                f"{JS}.>",
                f"$KV.{keyed.BUCKET}.>",  # the idempotency keys every api replica shares
                *own_checkpoint(checkpoints.API_VIEWS),
                "$JS.FC.>",
                "$JS.ACK.>",
            )
        ),
        Permissions((INTENTS, "$SRV.>", _own_inbox("api"))),  # $SRV: service discovery
        allow_responses=True,
    )


def controller_user(password: str) -> NatsUser:
    return NatsUser(
        "controller",
        password,
        Permissions(
            (
                "virt.>",
                "dlq.virt-controller",
                f"{JS}.>",
                "$JS.ACK.>",
                "$JS.FC.>",
                f"$KV.{lease.BUCKET}.>",  # the active/standby lease
                *own_checkpoint("virt-controller"),
            ),
            JS_DESTRUCTIVE,
        ),
        Permissions((_own_inbox("controller"),)),
    )


def upkeep_user(password: str, stream: str = "VIRT") -> NatsUser:
    """The log's upkeep: writes the index, creates the archive, records the floor and
    purges the hot log (only it); appends no event and serves no intent."""
    return NatsUser(
        "upkeep",
        password,
        Permissions(
            (
                "vidx.>",  # the debugging index (eventstore/index.py)
                *JS_READ,
                f"{JS}.STREAM.CREATE.{index.stream_name(stream)}",
                f"{JS}.STREAM.CREATE.{archive.archive_name(stream)}",
                f"{JS}.STREAM.CREATE.KV_{checkpoints.BUCKET}",
                f"{JS}.STREAM.CREATE.KV_{lease.BUCKET}",
                f"{JS}.STREAM.CREATE.{stream}",  # whoever starts first creates the streams
                f"{JS}.STREAM.CREATE.{stream}_DLQ",
                f"{JS}.STREAM.PURGE.{stream}",  # ended aggregates leave the hot log
                f"{JS}.CONSUMER.LIST.{stream}",  # the durable consumers' ack floors
                f"{JS}.STREAM.MSG.GET.>",
                f"$KV.{lease.BUCKET}.>",  # the active/standby lease
                *own_checkpoint(archive.FLOOR_KEY),  # the hot log's floor
            ),
        ),
        Permissions((_own_inbox("upkeep"),)),
    )


def handler_user(node: str, password: str, stream: str = "VIRT") -> NatsUser:
    n = token(node)
    service = f"virt-handler-{node}"
    name = f"handler-{node}"
    return NatsUser(
        name,
        password,
        Permissions(
            (
                f"virt.vmi.*.*.*.{n}",
                "virt.migration.*.*.*.*",
                f"virt.node.*.{n}.*.{n}",
                # the answers to the volume copies of snapshots and restores it ran
                f"virt.vmsnapshotcontent.*.*.VolumesCopied.{n}",
                f"virt.vmrestore.*.*.VolumesCopied.{n}",
                # a DataVolume's import it runs (CDI's importer)
                f"virt.datavolume.*.*.ImportProgressed.{n}",
                f"virt.datavolume.*.*.ImportFinished.{n}",
                f"virt.datavolume.*.*.UploadReady.{n}",
                # an upload into a claim no DataVolume owns
                f"virt.pvc.*.*.UploadReady.{n}",
                f"virt.pvc.*.*.ImportFinished.{n}",
                # a reclaimed volume's disk it deleted (the volume deleter)
                f"virt.pv.*.*.VolumeReclaimed.{n}",
                f"dlq.{service}",
                f"$KV.{heartbeats.BUCKET}.{heartbeats.key_of(node)}",
                *own_checkpoint(service),
                *JS_READ,
                f"{JS}.STREAM.CREATE.KV_{heartbeats.BUCKET}",
                f"{JS}.STREAM.CREATE.KV_{checkpoints.BUCKET}",
                # the shell ensures the streams at start (whoever starts first creates them)
                f"{JS}.STREAM.CREATE.{stream}",
                f"{JS}.STREAM.CREATE.{stream}_DLQ",
                f"{JS}.CONSUMER.DURABLE.CREATE.{stream}.{service}",
                f"{JS}.CONSUMER.MSG.NEXT.{stream}.{service}",
                f"$JS.ACK.{stream}.{service}.>",
            ),
            JS_DESTRUCTIVE,
        ),
        Permissions((_own_inbox(name),)),
    )


def reader_user(password: str) -> NatsUser:
    return NatsUser(
        "reader",
        password,
        Permissions(JS_READ, JS_DESTRUCTIVE),
        Permissions((_own_inbox("reader"),)),
    )


def shadow_user(password: str) -> NatsUser:
    """A shadow (services/shadow/): reads the log and the live controller's checkpoint,
    writes its latest divergences; publishes no event and no intent."""
    return NatsUser(
        "shadow",
        password,
        Permissions(
            (
                *JS_READ,
                f"{JS}.STREAM.CREATE.KV_{checkpoints.BUCKET}",  # (whoever starts first)
                f"{JS}.STREAM.CREATE.KV_{shadows.BUCKET}",
                f"$KV.{shadows.BUCKET}.>",
            ),
            JS_DESTRUCTIVE,
        ),
        Permissions((_own_inbox("shadow"),)),
    )


def scripts_user(password: str) -> NatsUser:
    return NatsUser(
        "scripts",
        password,
        Permissions((*JS_READ, INTENTS, "$SRV.>"), JS_DESTRUCTIVE),
        Permissions(("_INBOX.>", "virt.>")),  # its requests' replies; events (read)
    )


def admin_user(password: str) -> NatsUser:
    return NatsUser("admin", password, Permissions((">",)), Permissions((">",)))


def users(nodes: Iterable[str], passwords: dict[str, str] | None = None) -> list[NatsUser]:
    """Every user for a cluster of `nodes`; passwords from `passwords` by user name,
    generated where missing."""
    given = passwords or {}

    def pw(name: str) -> str:
        return given.get(name) or secrets.token_urlsafe(24)

    out = [
        api_user(pw("api")),
        controller_user(pw("controller")),
        upkeep_user(pw("upkeep")),
        reader_user(pw("reader")),
        shadow_user(pw("shadow")),
        scripts_user(pw("scripts")),
        admin_user(pw("admin")),
    ]
    out += [handler_user(n, pw(f"handler-{n}")) for n in nodes]
    return out


def _perm(p: Permissions) -> str:
    parts = [f"allow: {json.dumps(list(p.allow))}"]
    if p.deny:
        parts.append(f"deny: {json.dumps(list(p.deny))}")
    return "{ " + ", ".join(parts) + " }"


def authorization_block(all_users: Iterable[NatsUser]) -> str:
    """nats-server's `authorization` block for the users (their passwords in clear: the
    config file is the owner's alone)."""
    lines = ["authorization {", "  users = ["]
    for u in all_users:
        responses = ", allow_responses: true" if u.allow_responses else ""
        lines.append(
            f"    {{ user: {json.dumps(u.name)}, password: {json.dumps(u.password)}, "
            f"permissions: {{ publish: {_perm(u.publish)}, "
            f"subscribe: {_perm(u.subscribe)}{responses} }} }}"
        )
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"
