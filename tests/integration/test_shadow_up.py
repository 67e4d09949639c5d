"""`virtstream up --shadow`: two shadows beside the live controller on the real stream. One
is a controller changed on purpose (it schedules only on ticks): each placement the live
controller makes raises `virtstream_shadow_divergence_total{reason="live-only"}` and a log
line with the live decision. The other is today's controller: it reproduces every decision
it compares. Neither can append: their NATS user publishes no event."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import nats
import pytest
from nats.errors import Error as NatsError
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import REPO
from tests.factories import vm_manifest
from tests.integration.browser import chromium, screenshot, skip_reason
from tests.integration.polling import status_of, until
from tests.integration.up_process import RunningUp, running_up

FORGETFUL = "controller=tests.unit.whatif_fixtures:forgetful"
TODAY = "controller=services.controller.reactor:ControllerReactor"
VMS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"
VMIS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances"
NAMES = ("sh-a", "sh-b", "sh-c")


@pytest.fixture(scope="module")
def up() -> Iterator[RunningUp]:
    with running_up("vs-shadow-", 1, "--shadow", FORGETFUL, "--shadow", TODAY) as running:
        yield running


def _metrics(up: RunningUp, service: str) -> dict[tuple[str, str], float]:
    """(sample name, reason) → value, from the shadow's /metrics (its port as `up` recorded
    it, Prometheus's token, the cluster's CA)."""
    recorded = msgspec.json.decode((up.data_dir / "up.json").read_bytes())
    argv = recorded[service]["argv"]
    port = int(argv[argv.index("--metrics-port") + 1])
    token = (up.data_dir / "credentials" / "prometheus-token").read_text().strip()
    ca = ssl.create_default_context(cafile=up.data_dir / "pki" / "ca.crt")
    with httpx.Client(verify=ca, timeout=10) as http:
        text = (
            http.get(
                f"https://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {token}"}
            )
            .raise_for_status()
            .text
        )
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("virtstream_shadow_"):
                out[(s.name, s.labels.get("reason", ""))] = s.value
    return out


def _divergences(up: RunningUp, service: str) -> list[dict[str, Any]]:
    lines = (up.data_dir / "logs" / f"{service}.log").read_text().splitlines()
    found = []
    for line in lines:
        if line.startswith("{") and '"shadow divergence"' in line:
            found.append(json.loads(line))
    return found


@pytest.fixture(scope="module")
def running(up: RunningUp) -> list[dict[str, Any]]:
    """Three VMs made and Running; their VMIs."""
    following = ("virtstream_shadow_divergence_total", "live-only")  # once it compares
    until(lambda: all(following in _metrics(up, s) for s in ("shadow", "shadow-2")), 30, "both")
    for name in NAMES:
        up.http.post(VMS, json=vm_manifest(name, memory="128Mi")).raise_for_status()
    for name in NAMES:
        path = f"{VMIS}/{name}"
        until(lambda: status_of(up.http, path)["phase"] == "Running", 60, name)  # noqa: B023
    return [up.http.get(f"{VMIS}/{n}").json() for n in NAMES]


def test_a_changed_controller_in_shadow_diverges_on_every_live_placement(
    up: RunningUp, running: list[dict[str, Any]]
) -> None:
    key = ("virtstream_shadow_divergence_total", "live-only")
    until(lambda: _metrics(up, "shadow")[key] >= len(NAMES), 15, "the divergences counted")
    found = until(
        lambda: len(_divergences(up, "shadow")) >= len(NAMES) and _divergences(up, "shadow")
    )
    placed = {f"vmi/default/{v['metadata']['name']}": v["status"]["nodeName"] for v in running}
    scheduled = [d for d in found if d["live"] and d["live"]["type"] == "PodScheduled"]
    assert {d["aggregate"] for d in scheduled} == set(placed)
    for d in scheduled:
        assert d["reason"] == "live-only" and d["shadow"] is None
        assert d["live"]["node"] == placed[d["aggregate"]]
        assert d["service"] == "virt-controller" and d["decider"] == FORGETFUL
        assert d["cause_seq"] > 0 and d["correlation_id"]
    assert _metrics(up, "shadow")[("virtstream_shadow_divergence_total", "differs")] == 0


def test_todays_controller_in_shadow_reproduces_the_live_decisions(
    up: RunningUp, running: list[dict[str, Any]]
) -> None:
    reproduced = ("virtstream_shadow_reproduced_total", "")
    until(lambda: _metrics(up, "shadow-2")[reproduced] >= 2 * len(NAMES), 15, "reproduced")
    got = _metrics(up, "shadow-2")
    assert [v for (name, _), v in got.items() if name.endswith("divergence_total")] == [0, 0, 0]
    assert _divergences(up, "shadow-2") == []


def test_a_shadow_cannot_append(up: RunningUp, running: list[dict[str, Any]]) -> None:
    password = (up.data_dir / "credentials" / "nats-shadow").read_text().strip()
    subject = "virt.vm.default.sh-a.VMStopRequested._"

    async def append() -> list[str]:
        errors: list[str] = []

        async def on_error(e: Exception) -> None:
            errors.append(str(e))

        nc = await nats.connect(
            up.nats_url, user="shadow", password=password, inbox_prefix="_INBOX_shadow",
            error_cb=on_error, allow_reconnect=False,
        )  # fmt: skip
        try:
            with contextlib.suppress(NatsError, asyncio.TimeoutError):
                await nc.jetstream().publish(subject, b"{}", timeout=2)
        finally:
            await nc.close()
        return errors

    refused = f'permissions violation for publish to "{subject.lower()}"'
    assert any(refused in e.lower() for e in asyncio.run(append()))


def test_a_decider_named_wrong_is_refused_before_anything_starts(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "up", "--data-dir", str(tmp_path),
         "--shadow", "controller=nowhere:nothing"],
        cwd=REPO, capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert done.returncode == 2
    assert "--shadow 'controller=nowhere:nothing': No module named 'nowhere'" in done.stdout


SHADOWS = "/apis/debug.virtstream.io/v1alpha1/shadows"


def test_the_api_serves_each_shadows_latest_divergences(
    up: RunningUp, running: list[dict[str, Any]]
) -> None:
    def served() -> dict[str, Any]:
        doc: dict[str, Any] = up.http.get(f"{SHADOWS}/shadow").raise_for_status().json()
        return doc if len(doc["status"]["divergences"]) >= len(NAMES) else {}

    doc = until(served, 15, "the divergences written")
    assert doc["kind"] == "Shadow" and doc["apiVersion"] == "debug.virtstream.io/v1alpha1"
    status = doc["status"]
    assert status["decider"] == FORGETFUL and status["service"] == "virt-controller"
    scheduled = [d for d in status["divergences"] if d["live"]["type"] == "PodScheduled"]
    assert {d["aggregate"] for d in scheduled} == {f"vmi/default/{n}" for n in NAMES}
    assert all(d["reason"] == "live-only" and d["shadow"] is None for d in scheduled)
    listed = up.http.get(SHADOWS).raise_for_status().json()
    assert listed["kind"] == "ShadowList"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["shadow", "shadow-2"]
    assert listed["items"][1]["status"]["divergences"] == []
    missing = up.http.get(f"{SHADOWS}/nothing")
    assert missing.status_code == 404
    assert missing.json()["message"] == 'shadows.debug.virtstream.io "nothing" not found'


def test_the_web_console_shows_the_divergences_with_both_decisions(
    up: RunningUp, running: list[dict[str, Any]]
) -> None:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import expect

    token = (up.data_dir / "credentials" / "admin-token").read_text().strip()
    with chromium() as browser:
        page = browser.new_page()
        page.goto(f"{up.url}/ui/#token={token}")
        page.get_by_role("link", name="Shadow").click()
        forgetful = page.locator('section[data-name="shadow"]')
        expect(forgetful.locator(".decider")).to_have_text(FORGETFUL)
        for name in NAMES:
            row = forgetful.locator(
                f'tr[data-aggregate="vmi/default/{name}"][data-reason="live-only"]'
            )
            expect(row.locator("td.live")).to_contain_text("PodScheduled on node-1")
            expect(row.locator("td.shadow")).to_have_text("nothing")
        today = page.locator('section[data-name="shadow-2"]')
        expect(today.locator(".none")).to_be_visible()
        screenshot(page, "shadow")
