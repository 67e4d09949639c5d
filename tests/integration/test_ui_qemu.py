"""The guest in the web console (qemu mode, TCG): the serial console in the page (xterm.js
over the api's console WebSocket, the token carried as Kubernetes' WebSocket subprotocol)
answers a command typed into it; the VNC tab shows the screen (noVNC over the vnc
WebSocket) and its screenshot button shows the guest's screen as a PNG. One `virtstream up
--hypervisor qemu --nodes 1` and one vm-cirros.yaml guest (~45 s on 2 cores).

Skipped without the qemu packages or root, or without Debian's chromium."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from ops import guest_images
from services.launcher.rundir import guest_console_log
from tests.integration.browser import assert_not_blank, chromium, screenshot, skip_reason
from tests.integration.polling import until
from tests.integration.qemu_support import CIRROS, qemu_marks
from tests.integration.up_process import RunningUp, running_up

pytestmark = [
    *qemu_marks,
    pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or ""),
]
VMS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"
VMIS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances"
SUB_VM = "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines"
BOOT_TIMEOUT = 90.0


def phase(up: RunningUp) -> str:
    r = up.http.get(f"{VMIS}/vm-cirros")
    return str(r.json()["status"].get("phase")) if r.is_success else ""


@pytest.fixture(scope="module")
def guest() -> Iterator[RunningUp]:
    guest_images.ensure_images()
    with running_up("vs-ui-", 1, "--hypervisor", "qemu") as up:
        assert up.http.post(VMS, json=yaml.safe_load(CIRROS.read_text())).is_success
        assert up.http.put(f"{SUB_VM}/vm-cirros/start", json={}).is_success
        until(lambda: phase(up) == "Running", BOOT_TIMEOUT, "vm-cirros Running")
        log = guest_console_log(up.data_dir / "run", "node-1", "default", "vm-cirros")
        until(
            lambda: log.exists() and "vm-cirros:~# " in log.read_text(errors="replace"),
            BOOT_TIMEOUT,
            "the guest's prompt",
        )
        yield up


@pytest.fixture(scope="module")
def page(guest: RunningUp) -> Iterator[Any]:
    token = (guest.data_dir / "credentials" / "admin-token").read_text().strip()
    with chromium() as context:
        context.set_default_timeout(30_000)
        p = context.new_page()
        p.goto(f"{guest.url}/ui/#token={token}")
        p.wait_for_selector('tr[data-key="default/vm-cirros"]')
        yield p


def test_the_serial_console_in_the_page_answers_a_command(guest: RunningUp, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(f"{guest.url}/ui/vms/default/vm-cirros?tab=console")
    expect(page.locator("#console-status")).to_have_attribute("data-state", "open")
    # a qemu node's guest: both tabs offered (the test driver's get neither)
    expect(page.locator('[data-tab="console"]')).to_be_visible()
    expect(page.locator('[data-tab="vnc"]')).to_be_visible()
    rows = page.locator(".xterm-rows")
    page.locator("#terminal").click()
    page.keyboard.press("Enter")
    expect(rows).to_contain_text("vm-cirros:~#")
    mark = f"{random.randrange(16**6):06x}"
    # the shell's answer, not the typed line's echo: only the answer has 42 in it
    page.keyboard.type(f"echo hello-$((6*7))-{mark}")
    page.keyboard.press("Enter")
    expect(rows).to_contain_text(f"hello-42-{mark}")
    screenshot(page, "guest-console")


def test_the_vnc_tab_shows_the_screen_and_takes_a_screenshot(
    guest: RunningUp, page: Any, tmp_path: Any
) -> None:
    from playwright.sync_api import expect

    page.goto(f"{guest.url}/ui/vms/default/vm-cirros?tab=vnc")
    expect(page.locator("#vnc-status")).to_have_attribute("data-state", "open")
    expect(page.locator("#vnc-screen canvas")).to_be_visible()
    page.click("#screenshot")
    img = page.locator("#screenshot-img")
    expect(img).to_be_visible()
    assert img.evaluate("el => el.naturalWidth") >= 640
    path = tmp_path / "guest-screen.png"
    img.screenshot(path=str(path))
    assert_not_blank(path, min_colours=2)  # the VGA text console: text on black
    screenshot(page, "guest-vnc")
