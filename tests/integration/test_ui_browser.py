"""The web console in Debian's headless Chromium against a real `virtstream up --nodes 2
--metrics`: login (the form, and `virtstream ui`'s address), live tables fed by the watch
API, an action behind its confirmation, a view user offered nothing and shown a 403 as one,
a VM's page (its events in order with their changes, time travel, `why`, the manifest
editor's inline errors), a node's page and the metrics charts; and what the console does
not claim: no Console or VNC tab where the test driver's guests have neither, the api's
refusal instead of an empty terminal, no managed fields in the timeline's changes, no
Prometheus asked by an api without one, a Running row's actions whole at 1400 px, the
Events snapshots and restores record, `virtstream ui` on the api its data dir names.
Each page's screenshot is kept in test-artifacts/ui/ and checked not to be blank.

The tests run in file order on one cluster (~1 min on 2 cores)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from ops.ports import free_port
from ops.supervisor import interrupt
from tests.integration.browser import chromium, screenshot, skip_reason
from tests.integration.polling import until
from tests.integration.up_process import REPO, RunningUp, running_up

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")

VMS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"
SUB = "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines"
VIEW_TOKEN = "console-view-token-0123456789abcdef"
WAIT = 30_000  # ms: the machine is shared


def vm(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "console-test"}},
        "spec": {
            "runStrategy": "Halted",
            "template": {
                "spec": {
                    "domain": {
                        "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
                        "resources": {"requests": {"memory": "64Mi"}},
                    },
                    "volumes": [{"name": "root", "containerDisk": {"image": "cirros"}}],
                }
            },
        },
    }


@pytest.fixture(scope="module")
def cluster() -> Iterator[RunningUp]:
    extra = ("--metrics", "--prometheus-port", str(free_port()), "--scrape-interval", "1s")
    with running_up("virtstream-ui-", 2, *extra) as up:
        yield up


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as context:
        context.set_default_timeout(WAIT)
        yield context


def admin_token(up: RunningUp) -> str:
    return (up.data_dir / "credentials" / "admin-token").read_text().strip()


def logged_in(browser: Any, up: RunningUp, path: str = "/ui/", token: str = "") -> Any:
    page = browser.new_page()
    page.goto(f"{up.url}/ui/#token={token or admin_token(up)}")
    page.wait_for_selector("[data-plural] table, [data-plural] .error")
    if path != "/ui/":
        page.goto(f"{up.url}{path}")
    return page


def status_cell(page: Any, name: str) -> Any:
    return page.locator(f'tr[data-key="default/{name}"] td.status')


def test_login_form_then_the_tables_fill_and_follow_a_vm_started_elsewhere(
    cluster: RunningUp, browser: Any
) -> None:
    from playwright.sync_api import expect

    cluster.http.post(VMS, json=vm("web-1")).raise_for_status()
    page = browser.new_page()
    lists: list[str] = []
    page.on(
        "request",
        lambda r: (
            lists.append(r.url)
            if "/virtualmachines" in r.url and "watch=true" not in r.url and r.method == "GET"
            else None
        ),
    )
    page.goto(f"{cluster.url}/ui/")
    page.fill("#token", "not-a-token")
    page.click("#login button[type=submit]")
    expect(page.locator("#login .error")).to_contain_text("Unauthorized (401)")
    page.fill("#token", admin_token(cluster))
    page.click("#login button[type=submit]")
    expect(status_cell(page, "web-1")).to_have_text("Stopped")
    screenshot(page, "cluster-vms")

    # elsewhere: a new VM, started through the api; the open table follows both
    cluster.http.post(VMS, json=vm("web-2")).raise_for_status()
    expect(status_cell(page, "web-2")).to_have_text("Stopped")
    cluster.http.put(f"{SUB}/web-2/start", json={}).raise_for_status()
    expect(status_cell(page, "web-2")).to_have_text("Running")
    assert len(lists) == 1, f"the table was listed again instead of watched: {lists}"

    page.locator("#search").fill("web-2")
    expect(page.locator('tr[data-key="default/web-1"]')).to_be_hidden()
    page.locator("#search").fill("")
    page.click('[data-tab="vmis"]')
    expect(page.locator('tr[data-key="default/web-2"] td.status')).to_have_text("Running")
    screenshot(page, "cluster-vmis")
    page.click('[data-tab="nodes"]')
    expect(page.locator('tr[data-key="node-1"]')).to_contain_text("Ready")
    screenshot(page, "cluster-nodes")
    # storage: the classes every cluster has, with their printer columns
    page.click('[data-tab="storage"]')
    expect(page.locator('tr[data-key="local"]')).to_contain_text("WaitForFirstConsumer")
    expect(page.locator('tr[data-key="shared"]')).to_contain_text("Immediate")
    screenshot(page, "cluster-storage")
    page.close()


def test_virtstream_ui_prints_an_address_that_is_logged_in_and_keeps_the_token_out_of_urls(
    cluster: RunningUp, browser: Any
) -> None:
    from playwright.sync_api import expect

    out = subprocess.run(
        [sys.executable, "-m", "cli.main", "--server", cluster.url, "ui"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    address = out.stdout.strip()
    token = admin_token(cluster)
    assert address == f"{cluster.url}/ui/#token={token}"
    page = browser.new_page()
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url))
    page.goto(address)
    expect(status_cell(page, "web-1")).to_be_visible()
    assert page.evaluate("location.hash") == ""
    assert page.evaluate("sessionStorage.getItem('virtstream.token')") == token
    assert not [u for u in sent if token in u.split("#")[0]], "the token went into a URL"
    page.close()


def test_an_action_asks_first_then_changes_the_state(cluster: RunningUp, browser: Any) -> None:
    from playwright.sync_api import expect

    page = logged_in(browser, cluster)
    row = page.locator('tr[data-key="default/web-2"]')
    expect(row.locator("td.status")).to_have_text("Running")
    row.locator('button[data-action="stop"]').click()
    expect(page.locator("#confirm-text")).to_have_text("Stop VM default/web-2?")
    page.click("#confirm-ok")
    expect(row.locator("td.status")).to_have_text("Stopped")
    expect(row.locator('button[data-action="start"]')).to_be_visible()
    assert cluster.http.get(f"{VMS}/web-2").json()["spec"]["runStrategy"] == "Halted"
    page.close()


def test_a_view_user_is_offered_no_action_and_sees_a_403_as_one(
    cluster: RunningUp, browser: Any
) -> None:
    from playwright.sync_api import expect

    auth_file = cluster.data_dir / "auth.yaml"
    doc = yaml.safe_load(auth_file.read_text())
    doc["tokens"].append({"token": VIEW_TOKEN, "user": "vera", "groups": ["console-viewers"]})
    doc.setdefault("clusterRoleBindings", []).append(
        {
            "name": "console-viewers",
            "roleRef": {"kind": "ClusterRole", "name": "kubevirt.io:view"},
            "subjects": [{"kind": "Group", "name": "console-viewers"}],
        }
    )
    auth_file.write_text(yaml.safe_dump(doc))
    headers = {"Authorization": f"Bearer {VIEW_TOKEN}"}
    until(lambda: cluster.http.get(VMS, headers=headers).is_success, 15, "the new token")

    page = logged_in(browser, cluster, token=VIEW_TOKEN)
    expect(status_cell(page, "web-2")).to_have_text("Stopped")
    # every row's access reviews have answered, and offered nothing
    rows = page.locator("tr[data-key]")
    expect(page.locator("td.actions[data-checked=true]")).to_have_count(rows.count())
    assert page.locator("button.action").count() == 0
    screenshot(page, "view-user-vms")
    page.click('[data-tab="nodes"]')
    refusal = page.locator('[data-plural="nodes"] .error')
    expect(refusal).to_contain_text(
        'Forbidden (403): nodes is forbidden: User "vera" cannot list resource "nodes"'
    )
    page.goto(f"{cluster.url}/ui/vms/default/web-2")
    expect(page.locator("ol.events li").first).to_be_visible()
    assert page.locator("button.action").count() == 0
    assert page.locator('[data-tab="console"]').count() == 0
    page.click('[data-tab="yaml"]')
    assert page.locator("#manifest").evaluate("el => el.readOnly")
    assert page.locator("#save").is_hidden()
    page.close()


def test_the_vm_page_lists_its_events_in_order_and_travels_back(
    cluster: RunningUp, browser: Any
) -> None:
    from playwright.sync_api import expect

    page = logged_in(browser, cluster, "/ui/vms/default/web-2")
    expect(page.locator("[data-painted=true]")).to_have_count(1)
    events = page.locator("ol.events > li")
    seqs = [int(s) for s in events.evaluate_all("els => els.map(e => e.dataset.seq)")]
    types = events.evaluate_all("els => els.map(e => e.dataset.type)")
    assert seqs == sorted(seqs) and len(seqs) >= 6, seqs
    assert types[0] == "VMCreated"
    assert {"VMRunStrategyChanged", "DomainStarted", "VMStopRequested"} <= set(types), types
    first = events.first
    expect(first.locator("pre.changes")).to_contain_text("status.printableStatus: Stopped")
    started = types.index("VMRunStrategyChanged")
    expect(events.nth(started).locator(".links")).to_contain_text("caused #")

    point = page.locator("#at-point")
    expect(point).to_contain_text("printableStatus: Stopped")  # now
    running = types.index("DomainStarted")
    page.locator("#travel").evaluate(
        "(el, i) => { el.value = i; el.dispatchEvent(new Event('input')); }", running
    )
    expect(point).to_contain_text("printableStatus: Running")  # as it was then
    expect(events.nth(running)).to_have_class(re.compile(r"\bat\b"))
    screenshot(page, "vm-timeline")

    # a link from an event to one it caused moves the slider there
    link = events.nth(started).locator(".links a.seq-link").last
    target = int(link.get_attribute("data-target") or 0)
    link.click()
    assert int(page.locator("#travel").input_value()) == seqs.index(target)
    page.close()


def test_why_shows_the_chain_with_latencies_and_the_slowest_hop(
    cluster: RunningUp, browser: Any
) -> None:
    from playwright.sync_api import expect

    page = logged_in(browser, cluster, "/ui/vms/default/web-2")
    hops = page.locator("ol.chain > li")
    expect(hops.first).to_be_visible()
    assert hops.count() >= 3
    expect(page.locator("ol.chain > li.slowest")).to_have_count(1)
    expect(page.locator("ol.chain .badge.slow")).to_have_text("slowest")
    expect(hops.first).to_contain_text("virt-api (admin)")
    expect(hops.nth(1).locator(".latency")).to_have_text(re.compile(r"^\+\d"))
    # the chain of one event, from its timeline entry
    started = page.locator('ol.events > li[data-type="DomainStarted"]').first
    seq = started.get_attribute("data-seq")
    started.locator("button.why-btn").click()
    expect(page.locator("#why h3")).to_contain_text(f"Why #{seq}")
    expect(page.locator("ol.chain > li").last).to_contain_text("DomainStarted")
    screenshot(page, "vm-why")
    page.close()


def test_the_manifest_editor_shows_the_apis_refusal_inline_and_saves(
    cluster: RunningUp, browser: Any
) -> None:
    from playwright.sync_api import expect

    page = logged_in(browser, cluster, "/ui/vms/default/web-1?tab=yaml")
    editor = page.locator("#manifest")
    expect(editor).to_have_value(re.compile("name: root"))
    text = editor.input_value()
    editor.fill(text.replace("name: root", "name: Bad_Name", 1))
    page.click("#save")
    errors = page.locator("#manifest-errors")
    expect(errors).to_contain_text("Invalid (422)")
    expect(errors).to_contain_text("spec.template.spec.domain.devices.disks[0].name")
    line = int(errors.locator("li").first.get_attribute("data-line") or -1)
    assert editor.input_value().split("\n")[line].strip() in ("name: Bad_Name", "- name: Bad_Name")
    expect(page.locator(".gutter")).to_contain_text(f"! {line + 1}")
    screenshot(page, "vm-yaml-error")

    editor.fill(text.replace("app: console-test", "app: console-test\n    edited: by-the-console"))
    page.click("#save")
    until(
        lambda: cluster.http.get(f"{VMS}/web-1").json()["metadata"]["labels"].get("edited"),
        20,
        "the edit saved",
    )
    page.close()


def test_the_node_page_and_the_metrics_charts(cluster: RunningUp, browser: Any) -> None:
    from playwright.sync_api import expect

    cluster.http.put(f"{SUB}/web-1/start", json={}).raise_for_status()
    vmi = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances/web-1"

    def placed() -> str:
        r = cluster.http.get(vmi)  # 404 until the controller created it
        return str(r.json()["status"].get("nodeName") or "") if r.is_success else ""

    node = until(placed, 30, "web-1 placed")
    page = logged_in(browser, cluster, f"/ui/nodes/{node}")
    expect(page.locator(".meter").first).to_contain_text("CPU")
    expect(page.locator('tr[data-key="default/web-1"]')).to_be_visible()
    screenshot(page, "node")

    page.click("nav a[href='/ui/metrics']")
    chart = page.locator('[data-panel="vmis"] canvas')
    expect(chart.first).to_be_visible(timeout=60_000)
    screenshot(page, "metrics")
    page.close()


VMIS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances"


def test_no_guest_tabs_in_test_mode_and_the_apis_refusal_instead_of_a_black_box(
    cluster: RunningUp, browser: Any
) -> None:
    from playwright.sync_api import expect

    # web-1 runs (started above) on a node of libvirt's test driver: no console, no screen
    until(lambda: cluster.http.get(f"{VMIS}/web-1").json()["status"].get("phase") == "Running",
          30, "web-1 Running")  # fmt: skip
    page = logged_in(browser, cluster, "/ui/vms/default/web-1")
    expect(page.locator(".page-head .status")).to_have_text("Running")
    expect(page.locator('[data-tab="yaml"]')).to_be_visible()
    assert page.locator('[data-tab="console"], [data-tab="vnc"]').count() == 0

    # asked for anyway (an old link): the api's words, not a black box and "Disconnected"
    page.goto(f"{cluster.url}/ui/vms/default/web-1?tab=console")
    status = page.locator("#console-status")
    expect(status).to_contain_text("(400): No serial consoles are present.")
    expect(status).to_have_attribute("data-state", "refused")
    expect(status).not_to_contain_text("Disconnected")
    expect(page.locator("#terminal")).to_be_hidden()
    screenshot(page, "console-refused")
    page.goto(f"{cluster.url}/ui/vms/default/web-1?tab=vnc")
    expect(page.locator("#vnc-status")).to_contain_text("(400): No graphics devices are present.")
    page.close()


def test_a_running_rows_actions_are_whole_at_1400_px(cluster: RunningUp, browser: Any) -> None:
    from playwright.sync_api import expect

    page = logged_in(browser, cluster)
    page.set_viewport_size({"width": 1400, "height": 900})
    row = page.locator('tr[data-key="default/web-1"]')
    expect(row.locator("td.status")).to_have_text("Running")
    expect(row.locator("td.actions[data-checked=true]")).to_have_count(1)
    buttons = row.locator("td.actions button")
    labels = buttons.all_inner_texts()
    assert labels == ["Stop", "Restart", "Pause", "Migrate", "Delete"], labels
    cut = buttons.evaluate_all(
        """els => els.filter((b) => {
             const cell = b.closest('td').getBoundingClientRect(), r = b.getBoundingClientRect();
             return r.right > cell.right + 0.5 || r.bottom > cell.bottom + 0.5 ||
                    b.scrollWidth > b.clientWidth; }).map((b) => b.textContent)"""
    )
    assert not cut, f"cut at 1400 px: {cut}"
    screenshot(page, "actions-1400")
    page.close()


def test_the_timelines_changes_leave_managed_fields_out(cluster: RunningUp, browser: Any) -> None:
    from playwright.sync_api import expect

    page = logged_in(browser, cluster, "/ui/vms/default/web-1")
    expect(page.locator("[data-painted=true]")).to_have_count(1)
    changes = page.locator("ol.events pre.changes").all_inner_texts()
    assert changes, "no changes shown"
    assert not [c for c in changes if "managedFields" in c], changes
    # the editor's save (above) shows as what it changed
    assert any("+ metadata.labels.edited: by-the-console" in c for c in changes), changes
    page.close()


SNAPSHOTS = "/apis/snapshot.kubevirt.io/v1beta1/namespaces/default"


def test_snapshots_and_restores_show_their_events(cluster: RunningUp, browser: Any) -> None:
    from playwright.sync_api import expect

    source = {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "web-2"}
    snap = {"apiVersion": "snapshot.kubevirt.io/v1beta1", "kind": "VirtualMachineSnapshot",
            "metadata": {"name": "web-2-snap"}, "spec": {"source": source}}  # fmt: skip
    cluster.http.post(f"{SNAPSHOTS}/virtualmachinesnapshots", json=snap).raise_for_status()
    until(
        lambda: cluster.http.get(f"{SNAPSHOTS}/virtualmachinesnapshots/web-2-snap")
        .json().get("status", {}).get("readyToUse"),
        60, "the snapshot ready",
    )  # fmt: skip
    restore = {"apiVersion": "snapshot.kubevirt.io/v1beta1", "kind": "VirtualMachineRestore",
               "metadata": {"name": "web-2-back"},
               "spec": {"target": source, "virtualMachineSnapshotName": "web-2-snap"}}  # fmt: skip
    cluster.http.post(f"{SNAPSHOTS}/virtualmachinerestores", json=restore).raise_for_status()
    until(
        lambda: cluster.http.get(f"{SNAPSHOTS}/virtualmachinerestores/web-2-back")
        .json().get("status", {}).get("complete"),
        60, "the restore complete",
    )  # fmt: skip

    page = logged_in(browser, cluster)
    page.click('[data-tab="events"]')
    table = page.locator('[data-plural="events"]')
    expect(table).to_contain_text("SuccessfulVirtualMachineSnapshotContentCreate")
    expect(table).to_contain_text("Successfully created VirtualMachineSnapshotContent")
    expect(table).to_contain_text("VirtualMachineRestoreComplete")
    expect(table).to_contain_text("Successfully completed VirtualMachineRestore web-2-back")
    screenshot(page, "events-snapshot-restore")
    page.close()


def test_an_api_without_prometheus_is_asked_for_none(cluster: RunningUp, browser: Any) -> None:
    """No Metrics link, and no request to a Prometheus relay that is not there (no 404 in
    the browser's console); with one, the pages ask only for what they show."""
    from playwright.sync_api import expect

    port = free_port()
    d = cluster.data_dir
    env = {
        **os.environ,
        "VIRTSTREAM_NATS_USER": "api",
        "VIRTSTREAM_NATS_PASSWORD": (d / "credentials" / "nats-api").read_text().strip(),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.api", "--nats-url", cluster.nats_url, "--read-only",
         "--port", str(port), "--auth-file", str(d / "auth.yaml"),
         "--tls-cert", str(d / "pki" / "server.crt"), "--tls-key", str(d / "pki" / "server.key"),
         "--client-ca", str(d / "pki" / "ca.crt")],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    plain = f"https://127.0.0.1:{port}"
    try:
        until(lambda: cluster.http.get(f"{plain}/readyz").is_success, 60, "the second api")
        for base, charted in ((plain, False), (cluster.url, True)):
            page = browser.new_page()
            asked: list[str] = []
            errors: list[str] = []
            page.on("request", lambda r, asked=asked: asked.append(r.url))
            page.on(
                "console",
                lambda m, errors=errors: errors.append(m.text) if m.type == "error" else None,
            )
            page.goto(f"{base}/ui/#token={admin_token(cluster)}")
            expect(status_cell(page, "web-1")).to_be_visible()
            page.goto(f"{base}/ui/vms/default/web-1")
            expect(page.locator("[data-painted=true]")).to_have_count(1)
            page.goto(f"{base}/ui/nodes/node-1")
            expect(page.locator(".meter").first).to_contain_text("CPU")
            expect(page.locator("nav a[href='/ui/metrics']")).to_have_count(1 if charted else 0)
            relayed = [u for u in asked if "/prometheus/" in u]
            # with one, only the node's live heartbeat age is asked (no buildinfo probe)
            assert (
                all("/prometheus/api/v1/query?" in u for u in relayed) if charted else not relayed
            ), asked
            assert not [e for e in errors if "404" in e], errors
            page.close()
    finally:
        interrupt(proc, 30)


def test_virtstream_ui_asks_the_api_its_data_dir_names(cluster: RunningUp, browser: Any) -> None:
    from playwright.sync_api import expect

    env = {k: v for k, v in os.environ.items() if k != "VIRTSTREAM_SERVER"}
    env["VIRTSTREAM_DATA_DIR"] = str(cluster.data_dir)  # no --server: not :8080
    out = subprocess.run(
        [sys.executable, "-m", "cli.main", "ui"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    address = out.stdout.strip()
    assert address == f"{cluster.url}/ui/#token={admin_token(cluster)}", address
    page = browser.new_page()
    page.goto(address)
    expect(status_cell(page, "web-1")).to_be_visible()
    page.close()


def test_a_websocket_carries_its_token_as_kubernetes_subprotocol(cluster: RunningUp) -> None:
    """What the console's xterm.js and noVNC sockets send: no Authorization header (a
    browser has none for a WebSocket), the token as a subprotocol. Refusals come before the
    upgrade, with a Status body."""
    import base64
    import ssl

    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    from client import credentials

    ca = credentials.for_api(cluster.url).ca_pem
    url = cluster.url.replace("https", "wss", 1) + (
        "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachineinstances/web-1/console"
    )

    def refusal(token: str) -> tuple[int, dict[str, Any]]:
        b64 = base64.urlsafe_b64encode(token.encode()).decode().rstrip("=")
        protocols: Any = [f"base64url.bearer.authorization.k8s.io.{b64}", "plain.kubevirt.io"]
        with pytest.raises(InvalidStatus) as refused:
            connect(url, subprotocols=protocols, ssl=ssl.create_default_context(cadata=ca))
        response = refused.value.response
        return response.status_code, yaml.safe_load(bytes(response.body or b"{}"))

    # the admin passes the guard: the test driver's guest has no console (KubeVirt's 400)
    code, status = refusal(admin_token(cluster))
    assert (code, status["kind"], status["message"]) == (
        400,
        "Status",
        "No serial consoles are present.",
    )
    code, status = refusal(VIEW_TOKEN)  # a viewer may not type into a guest
    assert code == 403 and status["reason"] == "Forbidden", status
    assert 'User "vera" cannot get resource "virtualmachineinstances/console"' in status["message"]
    assert refusal("not-a-token")[0] == 401
