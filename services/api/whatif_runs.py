"""What-if for the web console, over HTTPS:

    GET /apis/debug.virtstream.io/v1alpha1/whatif[?schedulerPolicy=pack][&schedulerWeights=memory=1]

(kind `WhatIf`): the whole retained log replayed through the controller's decider with
that scheduler change (`virtstream whatif`'s report, `status`). A replay folds and decides
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
from litestar import Request, Response, get

from core.errors import bad_request, internal, timeout
from services.api.history import API_VERSION, PREFIX
from services.controller import scheduler

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
        self.reports: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}

    async def report(self, policy: str, weights: str, upto: int) -> dict[str, Any]:
        """The report for the log as far as `upto` (its last sequence when asked)."""
        async with self.lock:  # one replay at a time; the next asker reuses its report
            held = self.reports.get((policy, weights))
            if held is not None and held[0] >= upto:
                return held[1]
            found = await self._replay(policy, weights)
            self.reports[(policy, weights)] = (upto, found)
            return found

    async def _replay(self, policy: str, weights: str) -> dict[str, Any]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "services.whatif",
            "--nats-url", self.nats_url,
            "--scheduler-policy", policy, "--scheduler-weights", weights,
            env={**os.environ, **self.env},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            async with asyncio.timeout(self.limit):
                out, err = await proc.communicate()
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
    status = await runs.report(policy, weights, await store.stream_last_seq())
    doc = {
        "apiVersion": API_VERSION,
        "kind": "WhatIf",
        "spec": {"schedulerPolicy": policy or scheduler.SPREAD, "schedulerWeights": weights},
        "status": status,
    }
    return Response(_json.encode(doc), media_type="application/json")


ROUTES = [whatif]
