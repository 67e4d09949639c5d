"""The api's effectful shell around the pure intents: decide on the projection, append
with optimistic concurrency, wait until the projection has folded the append
(read-your-writes), retry once on a conflict."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import re
import secrets
import time
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import msgspec
import yaml

import kinds
from core.context import Append, Outcome, RequestContext
from core.errors import (
    internal,
    invalid_request,
    stale,
    timeout,
    unavailable,
)
from core.idempotency import ALNUM, Idempotency, decode_record, encode_record, keyed_context, scoped
from core.names import SOCKET_NAME_MAX
from events.codec import event_type
from events.envelope import Appended
from eventstore.keyed import KeyedRecords, MemoryKeyedRecords
from eventstore.port import ConcurrencyConflict, EventLog, EventLogError, Unavailable
from kinds import common_instancetypes as common
from kinds import namespace, storage
from kinds.registry import REGISTRY, Registry
from projections import namespaces
from projections.cluster import Cluster
from readside.runner import ProjectionRunner
from services.api.ids import new_id
from services.api.metrics import APPENDS, CONFLICTS

# The authenticated user of the request in hand (set by the auth guard, `services/api/
# guard.py`, or the NATS intent service): the actor of the events it appends.
CURRENT_USER: ContextVar[str] = ContextVar("virtstream_user", default="")
WAIT_SECONDS = 10.0
# a write without a precondition that met another writer's append is decided again this
# many times in all: a controller writing the same object's status is no reason to refuse
# a user's patch (a precondition that fails is the decision's own 409, never retried)
DECIDE_ATTEMPTS = 5
APPEND_SECONDS = 10.0  # how long a write keeps retrying an append whose outcome is unknown
READY_SECONDS = 2.0
IDEMPOTENCY_SECONDS = 120.0  # JetStream's duplicate window: a key is honoured this long


# the idempotency bucket did not answer: the request is refused before anything is appended
KEYS_UNREACHABLE: tuple[type[BaseException], ...] = (EventLogError,)


def random_suffix(n: int = 5) -> str:
    return "".join(secrets.choice(ALNUM) for _ in range(n))


def request_context(correlation_id: str) -> RequestContext:
    return RequestContext(
        now=time.time(),
        correlation_id=correlation_id,
        new_id=new_id,
        suffix=random_suffix,
    )


BUNDLE = Path(kinds.__file__).parent / "bundled"


BUNDLE_FILES = ("instancetypes.yaml", "preferences.yaml")
_DOCUMENT = re.compile(rb"^kind: ", re.MULTILINE)  # one top-level kind per document


def bundle_files() -> list[bytes]:
    return [(BUNDLE / name).read_bytes() for name in BUNDLE_FILES]


def bundled_instancetypes(files: list[bytes] | None = None) -> tuple[dict[str, Any], ...]:
    """The common instance types and preferences shipped with virtstream (libyaml's
    loader when there is one: the pure-Python one takes half a second on them)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return tuple(
        d
        for raw in (files if files is not None else bundle_files())
        for d in yaml.load_all(raw.decode(), Loader=loader)
        if d
    )


class ApiService:
    """Holds the store (None on a read replica) and the projection it answers from."""

    def __init__(
        self,
        runner: ProjectionRunner,
        store: EventLog | None,
        kinds: Registry = REGISTRY,
        *,
        socket_name_max: int = SOCKET_NAME_MAX,
        keys: KeyedRecords | None = None,
    ) -> None:
        """`keys`: where idempotency keys are kept (a JetStream bucket every replica shares,
        `eventstore/keyed.py`); this process's memory when None."""
        self.runner = runner
        self.store = store
        self.kinds = kinds
        self.socket_name_max = socket_name_max
        self.keys: KeyedRecords = keys or MemoryKeyedRecords(IDEMPOTENCY_SECONDS)

    @property
    def cluster(self) -> Cluster:
        return self.runner.cluster

    # ------------------------------------------------------------- readiness
    def _connected(self) -> bool:
        return self.runner.store.connected

    async def ready(self) -> bool:
        """Ready = connected, JetStream answers, and the projection has folded everything
        the stream held a moment ago (so a write would be answered, and a read is fresh)."""
        if not self.runner.ready or not self._connected():
            return False
        try:
            async with asyncio.timeout(READY_SECONDS):
                last = await self.runner.store.stream_last_seq()
            return await self.runner.wait_for(last, READY_SECONDS)
        except Exception:  # any failure to answer is "not ready"
            return False

    async def bootstrap(self, *, common_instancetypes: bool = True) -> None:
        """The system namespaces, created when missing (as the API server's system
        namespaces controller does at its start): a create into `default` works on a
        new cluster; and the namespaces objects live in, for a log written before
        namespaces were objects. Then KubeVirt's common instance types and preferences,
        as its operator deploys them (`kinds/common_instancetypes.py`), unless
        `common_instancetypes` is off. Every writer may run it; a replica that lost the
        race finds the objects there and appends nothing."""
        for name in sorted({*namespaces.SYSTEM, *namespaces.in_use(self.cluster)}):
            ensure = functools.partial(namespace.ensure, name)
            await self.execute(ensure, f"bootstrap-namespace-{name}")
        for body in storage.CLASSES:  # the storage classes every cluster has
            name = str(body["metadata"]["name"])
            made = functools.partial(storage.ensure_class, body)
            await self.execute(made, f"bootstrap-storageclass-{name}")
        if common_instancetypes:
            await self._deploy_common_instancetypes()

    async def _deploy_common_instancetypes(self) -> None:
        """One decision for the whole bundle, its appends (one per object, each on its
        own aggregate) sent together rather than one after the other; nothing when every
        object bears the bundle's identifier. A replica that deployed first makes an
        append conflict: decided again on what it wrote, which leaves nothing to do."""
        files = bundle_files()
        ident = common.identifier(b"".join(files))
        count = sum(len(_DOCUMENT.findall(raw)) for raw in files)
        if common.up_to_date(self.cluster, ident, count):
            return
        documents = bundled_instancetypes(files)
        deploy = functools.partial(common.deploy, documents, ident)
        for _ in range(2):
            outcome = deploy(self.cluster, self._context("bootstrap-common-instancetypes", None))
            if not outcome.appends:
                return
            acks = await asyncio.gather(
                *(self._append_one(a) for a in outcome.appends), return_exceptions=True
            )
            failed = [a for a in acks if isinstance(a, BaseException)]
            if any(not isinstance(a, ConcurrencyConflict) for a in failed):
                raise next(a for a in failed if not isinstance(a, ConcurrencyConflict))
            landed = [a.seq for a in acks if isinstance(a, Appended)]
            await self._folded(max(landed, default=0))
            if not failed:
                return
            await self.runner.wait_for(await self.runner.store.stream_last_seq(), WAIT_SECONDS)

    # ------------------------------------------------------------------ writes
    def _context(self, correlation_id: str, idem: Idempotency | None) -> RequestContext:
        user = CURRENT_USER.get()
        if idem is not None:  # ids from the user's key: two users' keys never share one
            ctx = keyed_context(correlation_id, scoped(user, idem.key), time.time())
        else:
            ctx = request_context(correlation_id)
        if self.socket_name_max != ctx.socket_name_max or user:
            ctx = dataclasses.replace(ctx, socket_name_max=self.socket_name_max, user=user)
        return ctx

    @staticmethod
    def _same_request(idem: Idempotency, found: bytes) -> Outcome:
        fingerprint, outcome = decode_record(found)
        if fingerprint != idem.fingerprint:
            raise invalid_request(
                "the Idempotency-Key was already used for a different request; "
                "use a new key for a new request"
            )
        return outcome

    async def _remembered(self, idem: Idempotency) -> Outcome | None:
        """What the first request with this user's key decided, on any replica."""
        try:
            found = await self.keys.get(scoped(CURRENT_USER.get(), idem.key))
        except KEYS_UNREACHABLE:
            raise unavailable("the idempotency keys cannot be read: retry the request") from None
        return None if found is None else self._same_request(idem, found)

    async def _remember(self, idem: Idempotency, outcome: Outcome, replace: bool) -> Outcome:
        """Keep this decision under the user's key, unless another replica kept one first:
        then that one is the answer. `replace`: the decision kept before never landed (its
        append conflicted), so this one takes its place."""
        record = encode_record(idem.fingerprint, outcome)
        key = scoped(CURRENT_USER.get(), idem.key)
        try:
            if replace:
                await self.keys.put(key, record)
                return outcome
            found = await self.keys.create(key, record)
        except KEYS_UNREACHABLE:
            raise unavailable(
                "the idempotency key cannot be stored: the request was not applied"
            ) from None
        return outcome if found is None else self._same_request(idem, found)

    async def execute(
        self,
        decide: Callable[[Cluster, RequestContext], Outcome],
        correlation_id: str,
        idem: Idempotency | None = None,
        *,
        dry_run: bool = False,
    ) -> Outcome:
        """`appended` without the stream sequence. A dry run decides (admission and
        preconditions included) against the projection and appends nothing."""
        if dry_run:
            return decide(self.cluster, self._context(correlation_id, None))
        outcome, _ = await self.appended(decide, correlation_id, idem)
        return outcome

    async def appended(
        self,
        decide: Callable[[Cluster, RequestContext], Outcome],
        correlation_id: str,
        idem: Idempotency | None = None,
    ) -> tuple[Outcome, int]:
        """Decide and append; the outcome and the stream sequence of its last event (0 when
        nothing was appended), so a caller can follow what happens from there.

        On a conflict: wait for the projection to fold the winner and decide again (the
        preconditions may now answer with a better message), as the API server retries an
        update whose object moved under it; 409 after `DECIDE_ATTEMPTS` conflicts in a row.
        With an idempotency key, a request already answered (or whose append outcome was
        unknown) is answered from its first decision, whose events are appended again: the
        stream keeps one copy."""
        assert self.store is not None
        replace = False  # a decision kept under the key never landed: the next replaces it
        if idem is not None and (earlier := await self._remembered(idem)) is not None:
            try:
                last = await self._append(earlier)
            except ConcurrencyConflict:
                replace = True  # it never landed, and the aggregate moved on: decide anew
            else:
                await self._folded(last)
                return earlier, last
        history = 0  # the last sequence of a name whose object is gone (see below)
        for attempt in range(DECIDE_ATTEMPTS):
            outcome = decide(self.cluster, self._context(correlation_id, idem))
            if history and outcome.appends and outcome.appends[0].expected == 0:
                # a create that conflicted on a name with history, decided again on a
                # projection folded up to it, found no object: the earlier one of that name
                # was deleted, and the new one continues the name's aggregate
                first = msgspec.structs.replace(outcome.appends[0], expected=history)
                outcome = msgspec.structs.replace(outcome, appends=(first, *outcome.appends[1:]))
            if idem is not None:
                # kept before it is appended: a retry of a write whose outcome was unknown
                # appends the same events again, on whichever replica it reaches
                outcome = await self._remember(idem, outcome, replace)
            try:
                last = await self._append(outcome)
            except ConcurrencyConflict as exc:
                CONFLICTS.inc()
                replace = True
                if attempt == DECIDE_ATTEMPTS - 1:
                    res = self.kinds.of(outcome.kind).resource
                    raise stale(res, outcome.key.rsplit("/", 1)[-1]) from None
                actual = exc.actual if exc.actual > 0 else await self.store.stream_last_seq()
                if exc.expected == 0 and exc.actual > 0:
                    history = exc.actual
                await self.runner.wait_for(actual, WAIT_SECONDS)
                continue
            await self._folded(last)
            return outcome, last
        raise internal("unreachable")

    async def _folded(self, last: int) -> None:
        if last and not await self.runner.wait_for(last, WAIT_SECONDS):
            raise timeout("the event was appended but the projection has not caught up yet")

    async def _append(self, outcome: Outcome) -> int:
        assert self.store is not None
        last = 0
        for append in outcome.appends:
            ack = await self._append_one(append)
            APPENDS.labels(event_type(append.event)).inc()
            last = max(last, ack.seq)
        return last

    async def _append_one(self, append: Append) -> Appended:
        """One append, retried with the same event id while its outcome is unknown (a
        timeout, a connection lost mid-publish): the stream's duplicate detection (and, for
        optimistic appends, the store's lookup of its own id) makes the retry exactly-once.
        Nothing is published while disconnected, so a write that never reached a server is
        answered 503 and is not stored later by a reconnect's flush."""
        assert self.store is not None
        deadline = time.monotonic() + APPEND_SECONDS
        delay = 0.05
        sent = False
        while True:
            if self._connected():
                try:
                    sent = True
                    return await self.store.append(append.event, expected=append.expected)
                except Unavailable:  # it may have been stored: the same event id again
                    pass
            if time.monotonic() + delay > deadline:
                if sent:
                    raise timeout(
                        "the outcome of the write is unknown (the event store did not answer); "
                        "retry the request with the same Idempotency-Key"
                    )
                raise unavailable("the event store is unreachable: the request was not stored")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
