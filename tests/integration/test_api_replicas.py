"""Several api processes at once, read-your-writes: a read that carries the sequence its
client has seen (`Virtstream-Min-Sequence`, or Kubernetes' `resourceVersion` on a get or
list) is answered from a view that has folded it, never from an older one; a view that
does not get there in time answers 504 "Too large resource version"."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from eventstore.jetstream import JetStreamStore
from services.api import http_reads
from tests.integration.test_api_support import running_api

VMS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"


def vm(name: str, label: str) -> dict[str, object]:
    return {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": name, "labels": {"v": label}},
        "spec": {"runStrategy": "Manual",
                 "template": {"spec": {"domain": {"memory": {"guest": "64Mi"}}}}},
    }  # fmt: skip


async def test_a_read_carrying_a_sequence_waits_for_the_view_to_fold_it(
    store: JetStreamStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        running_api(store) as writer,
        running_api(store) as other,
        httpx.AsyncClient(
            base_url=writer.url, headers=writer.headers, verify=writer.verify, timeout=10
        ) as a,
        httpx.AsyncClient(
            base_url=other.url, headers=other.headers, verify=other.verify, timeout=10
        ) as b,
    ):
        created = await a.post(VMS, json=vm("x", "1"))
        assert created.status_code == 201
        seq = int(created.json()["metadata"]["resourceVersion"])
        assert int(created.headers["virtstream-sequence"]) >= seq

        # the other api asked for a sequence not written yet: it answers once it has folded
        # the next write, with that write in the answer
        waiting = asyncio.create_task(
            b.get(f"{VMS}/x", headers={"Virtstream-Min-Sequence": str(seq + 1)})
        )
        await asyncio.sleep(0.3)
        assert not waiting.done()
        patched = await a.patch(
            f"{VMS}/x",
            json={"metadata": {"labels": {"v": "2"}}},
            headers={"content-type": "application/merge-patch+json"},
        )
        assert patched.status_code == 200, patched.text
        assert int(patched.json()["metadata"]["resourceVersion"]) == seq + 1
        answer = await waiting
        assert answer.status_code == 200
        assert answer.json()["metadata"]["labels"] == {"v": "2"}

        # the same through Kubernetes' resourceVersion ("not older than") on a list
        listed = await b.get(VMS, params={"resourceVersion": str(seq + 1)})
        assert int(listed.json()["metadata"]["resourceVersion"]) >= seq + 1

        # a sequence the view never reaches: 504, Kubernetes' words
        monkeypatch.setattr(http_reads, "NOT_OLDER_THAN_SECONDS", 0.2)
        r = await b.get(f"{VMS}/x", headers={"Virtstream-Min-Sequence": str(seq + 1000)})
        assert r.status_code == 504
        assert r.json()["reason"] == "Timeout"
        assert r.json()["message"].startswith(f"Too large resource version: {seq + 1000}")
        bad = await b.get(VMS, params={"resourceVersion": "soon"})
        assert bad.status_code == 400
