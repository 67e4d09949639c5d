"""What-if for the web console, over HTTPS:

    GET /apis/debug.virtstream.io/v1alpha1/whatif[?schedulerPolicy=pack][&schedulerWeights=memory=1]
    POST /apis/debug.virtstream.io/v1alpha1/whatif   {"kind": "WhatIf", "spec": {...}}

(kind `WhatIf`): the whole retained log replayed through the controller's decider with
that scheduler change (`virtstream whatif`'s report, `status`). A POST asks as a review
object does: its spec holds the scheduler change or a `migrationPolicy` (a MigrationPolicy
manifest, put in place as the log begins, through the kind's admission: refused in the
api's words before any replay), one change at a time. A replay folds and decides
on every event, so it runs as a process of its own (services/whatif/__main__.py)
with the api's NATS credentials, one at a time, and its report is kept until the log grows:
asking again costs nothing while nothing happened. RBAC: the resource `whatif` of this
group, cluster-admin only (a report names objects of every namespace)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from typing import Any

import msgspec
from litestar import Request, Response, get, post

from core.errors import bad_request, internal, timeout
from services.api.history import API_VERSION, PREFIX
from services.controller import scheduler
from services.whatif import changes

STATE_KEY = "whatif"
TIMEOUT = 300.0  # seconds a replay may take before it is stopped and said so
_json = msgspec.json.Encoder()


class WhatIfRuns:
    """The api's what-if replays: how to start one, and the last report of each change."""

    def __init__(self, nats_url: str, env: dict[str, str], limit: float = TIMEOUT) -> None:
        self.nats_url = nats_url
        self.env = env  # the api's NATS credentials, as the child reads them
        self.limit = limit
        self.lock = asyncio.Lock()
        self.reports: dict[tuple[str, str, bytes], tuple[int, dict[str, Any]]] = {}

    async def report(
        self, policy: str, weights: str, upto: int, migration_policy: bytes = b""
    ) -> dict[str, Any]:
        """The report for the log as far as `upto` (its last sequence when asked);
        `migration_policy`: a MigrationPolicy's JSON, or nothing."""
        change = (policy, weights, migration_policy)
        async with self.lock:  # one replay at a time; the next asker reuses its report
            held = self.reports.get(change)
            if held is not None and held[0] >= upto:
                return held[1]
            found = await self._replay(*change)
            self.reports = {k: v for k, v in self.reports.items() if not k[2]}  # one kept
            self.reports[change] = (upto, found)
            return found

    async def _replay(self, policy: str, weights: str, migration_policy: bytes) -> dict[str, Any]:
        policy_args = ["--migration-policy", "-"] if migration_policy else []
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "services.whatif",
            "--nats-url", self.nats_url,
            "--scheduler-policy", policy, "--scheduler-weights", weights, *policy_args,
            env={**os.environ, **self.env},
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            async with asyncio.timeout(self.limit):
                out, err = await proc.communicate(migration_policy)
        except TimeoutError:
            raise timeout(f"the what-if replay took longer than {self.limit:.0f}s") from None
        finally:
            if proc.returncode is None:  # stopped (the time, a cancel): not left running
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        if proc.returncode != 0:
            lines = err.decode(errors="replace").strip().splitlines()
            raise internal(lines[-1] if lines else f"the what-if replay exited {proc.returncode}")
        report: dict[str, Any] = msgspec.json.decode(out)
        return report


@get(f"{PREFIX}/whatif", include_in_schema=False)
async def whatif(request: Request[Any, Any, Any]) -> Response[bytes]:
    policy = request.query_params.get("schedulerPolicy") or ""
    weights = request.query_params.get("schedulerWeights") or ""
    return await _answer(request, policy, weights, None)


@post(f"{PREFIX}/whatif", include_in_schema=False, status_code=200)
async def whatif_review(request: Request[Any, Any, Any]) -> Response[bytes]:
    try:
        doc = msgspec.json.decode(await request.body())
    except msgspec.DecodeError as e:
        raise bad_request(f"the body is not a WhatIf: {e}") from None
    spec = doc.get("spec") if isinstance(doc, dict) else None
    if not isinstance(spec, dict):
        raise bad_request("the body is not a WhatIf: no spec")
    policy, weights = (
        str(spec.get("schedulerPolicy") or ""),
        str(spec.get("schedulerWeights") or ""),
    )
    manifest = spec.get("migrationPolicy")
    if manifest is not None and (policy or weights):
        raise bad_request("one change at a time: a scheduler change or a migrationPolicy")
    if manifest is not None:
        try:
            changes.migration_policy(manifest)  # the api's refusal now, not the replay's
        except changes.NotAPolicy as e:
            raise bad_request(f"spec.migrationPolicy: {e}") from None
    return await _answer(request, policy, weights, manifest)


async def _answer(
    request: Request[Any, Any, Any], policy: str, weights: str, manifest: Any
) -> Response[bytes]:
    if policy and policy not in scheduler.POLICIES:
        raise bad_request(f"unknown scheduler policy {policy!r}: {' | '.join(scheduler.POLICIES)}")
    try:
        scheduler.parse_weights(weights)
    except ValueError as e:
        raise bad_request(f"schedulerWeights: {e}") from None
    runs: WhatIfRuns | None = request.app.state.get(STATE_KEY)
    if runs is None:
        raise internal("this api runs no what-if (a read replica, or started without NATS)")
    store = request.app.state["api"].runner.store
    packed = _json.encode(manifest) if manifest is not None else b""
    status = await runs.report(policy, weights, await store.stream_last_seq(), packed)
    spec: dict[str, Any] = {
        "schedulerPolicy": policy or scheduler.SPREAD,
        "schedulerWeights": weights,
    }
    if manifest is not None:
        spec["migrationPolicy"] = manifest
    doc = {"apiVersion": API_VERSION, "kind": "WhatIf", "spec": spec, "status": status}
    return Response(_json.encode(doc), media_type="application/json")


ROUTES = [whatif, whatif_review]
