"""What-if through the api and the web console, on a real `virtstream up --nodes 3` whose
six VMs today's scheduler spread: `pack` reports the placements that differ, each with the
live and the what-if node; no change reports none; a VM's What-if tab shows its own."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from tests.factories import vm_manifest
from tests.integration.browser import chromium, screenshot, skip_reason
from tests.integration.polling import status_of, until
from tests.integration.up_process import RunningUp, running_up

VMS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"
VMIS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances"
WHATIF = "/apis/debug.virtstream.io/v1alpha1/whatif"
NAMES = tuple(f"wi-{i}" for i in range(6))


@pytest.fixture(scope="module")
def up() -> Iterator[RunningUp]:
    with running_up("vs-whatif-", 3) as running:
        for name in NAMES:  # one at a time: each placement sees the ones before
            running.http.post(VMS, json=vm_manifest(name, memory="256Mi")).raise_for_status()
            path = f"{VMIS}/{name}"
            until(lambda: status_of(running.http, path)["phase"] == "Running", 60, name)  # noqa: B023
        yield running


def placed(up: RunningUp) -> dict[str, str]:
    return {n: up.http.get(f"{VMIS}/{n}").json()["status"]["nodeName"] for n in NAMES}


def test_pack_reports_each_placement_that_differs_and_no_change_none(up: RunningUp) -> None:
    live = placed(up)
    assert sorted(Counter(live.values()).values()) == [2, 2, 2]  # spread today
    r = up.http.get(WHATIF, params={"schedulerPolicy": "pack"}, timeout=120)
    assert r.status_code == 200, r.text
    doc: dict[str, Any] = r.json()
    assert doc["kind"] == "WhatIf" and doc["spec"]["schedulerPolicy"] == "pack"
    status = doc["status"]
    assert status["summary"]["change"] == "scheduler policy pack"
    moved = {d["aggregate"]: d for d in status["differences"] if d["live"] and d["whatif"]}
    assert moved
    for agg, d in moved.items():
        assert d["live"]["type"] == d["whatif"]["type"] == "PodScheduled"
        assert d["live"]["node"] == live[agg.split("/")[-1]] != d["whatif"]["node"]
    assert status["summary"]["placements"]["live"] == dict(Counter(live.values()))
    # the same question while the log has not grown: the same report
    again = up.http.get(WHATIF, params={"schedulerPolicy": "pack"}, timeout=120).json()
    assert again == doc
    none = up.http.get(WHATIF, timeout=120).json()["status"]
    assert none["differences"] == [] and none["summary"]["change"] == "none"
    assert none["summary"]["reproduced"] == none["summary"]["live_decisions"] > 0


def test_a_bad_change_is_a_400_in_the_schedulers_words(up: RunningUp) -> None:
    bad = up.http.get(WHATIF, params={"schedulerPolicy": "best"})
    assert bad.status_code == 400
    assert bad.json()["message"] == "unknown scheduler policy 'best': spread | pack"
    weights = up.http.get(WHATIF, params={"schedulerWeights": "disk=1"})
    assert weights.status_code == 400 and "unknown resource 'disk'" in weights.json()["message"]


def test_the_console_shows_the_cluster_and_a_vms_what_if(up: RunningUp) -> None:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import expect

    live = placed(up)
    moved = next(n for n in NAMES if live[n] != "node-1")  # pack puts every VMI on node-1
    token = (up.data_dir / "credentials" / "admin-token").read_text().strip()
    with chromium() as browser:
        browser.set_default_timeout(60_000)
        page = browser.new_page()
        page.goto(f"{up.url}/ui/#token={token}")
        page.get_by_role("link", name="What-if").click()
        page.select_option("#whatif-policy", "pack")
        page.get_by_role("button", name="What if?").click()
        expect(page.locator("#whatif-summary")).to_contain_text("change: scheduler policy pack")
        counts = Counter(live.values())
        for node in ("node-1", "node-2", "node-3"):
            row = page.locator(f'table.placements tr[data-node="{node}"]')
            expect(row.locator("td.live")).to_have_text(str(counts[node]))
        row = page.locator(f'table.differences tr[data-aggregate="vmi/default/{moved}"]')
        expect(row.locator("td.live")).to_contain_text(f"PodScheduled on {live[moved]}")
        expect(row.locator("td.whatif")).to_contain_text("PodScheduled on node-1")
        screenshot(page, "whatif")

        page.goto(f"{up.url}/ui/vms/default/{moved}?tab=whatif")
        page.get_by_role("button", name="What if?").click()
        mine = page.locator("table.differences tbody tr")
        expect(mine).to_have_count(1)
        expect(mine.locator("td.whatif")).to_contain_text("PodScheduled on node-1")


MIGRATIONS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstancemigrations"
SLOW = {
    "apiVersion": "migrations.kubevirt.io/v1alpha1",
    "kind": "MigrationPolicy",
    "metadata": {"name": "slow"},
    "spec": {"bandwidthPerMigration": "1Mi"},
}


def review(policy: dict[str, Any], **change: str) -> dict[str, Any]:
    spec = {"migrationPolicy": policy, **change}
    return {"apiVersion": "debug.virtstream.io/v1alpha1", "kind": "WhatIf", "spec": spec}


def test_a_migration_policy_reports_the_migrations_it_would_have_set_otherwise(
    up: RunningUp,
) -> None:
    """(Last: its migration moves a VMI, which the placement tests above compare.) The
    policy is put in place as the log begins: the migration that ran without one would have
    been scheduled with its settings; one the api would refuse is refused in its words, and
    two changes at once are one too many. The console asks the same from a VM's tab."""
    mig = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": "wi-mig", "namespace": "default"},
        "spec": {"vmiName": NAMES[0]},
    }
    up.http.post(MIGRATIONS, json=mig).raise_for_status()
    until(lambda: status_of(up.http, f"{MIGRATIONS}/wi-mig").get("phase") == "Succeeded", 90)
    r = up.http.post(WHATIF, json=review(SLOW), timeout=120)
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["kind"] == "WhatIf" and doc["spec"]["migrationPolicy"] == SLOW
    status = doc["status"]
    assert status["summary"]["change"] == "migration policy slow"
    mine = [d for d in status["differences"] if d["aggregate"] == "migration/default/wi-mig"]
    assert [(d["live"]["type"], d["live"]["fields"]) for d in mine] == [
        ("MigrationScheduled", ["settings"])
    ]
    bad = up.http.post(WHATIF, json=review({**SLOW, "metadata": {"name": "Not-A-Name"}}))
    assert bad.status_code == 422, bad.text
    assert bad.json()["kind"] == "Status" and "Not-A-Name" in bad.json()["message"]
    both = up.http.post(WHATIF, json=review(SLOW, schedulerPolicy="pack"))
    assert both.status_code == 400 and "one change at a time" in both.json()["message"]
    other = up.http.post(WHATIF, json=review({"kind": "VirtualMachine"}))
    assert other.status_code == 400 and "not a MigrationPolicy" in other.json()["message"]

    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import expect

    token = (up.data_dir / "credentials" / "admin-token").read_text().strip()
    with chromium() as browser:
        browser.set_default_timeout(60_000)
        page = browser.new_page()
        page.goto(f"{up.url}/ui/#token={token}")
        page.goto(f"{up.url}/ui/vms/default/{NAMES[0]}?tab=whatif")
        text = "kind: MigrationPolicy\nmetadata: {name: slow}\nspec: {bandwidthPerMigration: 1Mi}\n"
        page.fill("#whatif-migration-policy", text)
        page.get_by_role("button", name="What if?").click()
        expect(page.locator("#whatif-summary")).to_contain_text("change: migration policy slow")
        row = page.locator('table.differences tr[data-aggregate="migration/default/wi-mig"]')
        expect(row.locator("td.live")).to_contain_text("MigrationScheduled")
        expect(row.locator("td.live")).to_contain_text("settings differ")
