"""The web console's server side, pure: its files (lookup, the page for a console path,
no way out of the folder), the history document (links between events, the object only
where it changed), the WebSocket token as Kubernetes carries it, and RBAC for the history,
Prometheus and the public files."""

from __future__ import annotations

import base64

from events.meta import Aggregate, Kind
from kinds.registry import REGISTRY
from projections import replay
from services.api import history, ui_assets
from services.api.auth import WEBSOCKET_BEARER, websocket_bearer
from services.api.rbac import (
    ANONYMOUS,
    UNAUTHENTICATED,
    VIEW,
    Binding,
    Subject,
    User,
    allowed,
    attributes,
    cluster_roles,
)
from tests.debug_scenario import lifecycle

VM1 = Aggregate(kind=Kind.VM, namespace="default", name="vm1")
ROLES = cluster_roles(REGISTRY)
VIEWERS = (Binding(VIEW, (Subject("Group", "viewers"),)),)
VERA = User("vera", ("viewers", "system:authenticated"))


def test_the_files_are_served_and_console_paths_get_the_page() -> None:
    assets = ui_assets.Assets()
    index = assets.find("")
    assert index is not None and index.media_type == "text/html"
    assert assets.find("vms/default/vm-cirros") is index  # routed in the browser
    js = assets.find("js/main.js")
    assert js is not None and js.media_type == "text/javascript"
    assert js.etag.startswith('"') and len(js.etag) == 42
    licence = assets.find("vendor/xterm/LICENSE")
    assert licence is not None and licence.media_type == "text/plain"
    assert assets.find("vendor/novnc/core/rfb.js") is not None
    for outside in ("../app.py", "js/../../app.py", ".hidden/x.js", "nope.js"):
        assert assets.find(outside) is None, outside


def test_the_page_names_the_metrics_relay_only_when_there_is_a_prometheus() -> None:
    """Without one the console offers no Metrics page and asks no Prometheus (no 404)."""
    assets = ui_assets.Assets()
    plain, charted = assets.find(""), assets.find("vms/default/x", metrics=True)
    assert plain is not None and charted is not None
    assert ui_assets.METRICS_META in plain.body and ui_assets.METRICS_ON not in plain.body
    assert ui_assets.METRICS_ON in charted.body and charted.etag != plain.etag
    assert assets.find("index.html", metrics=True) is charted


def test_the_history_document_links_causes_and_carries_objects_where_they_changed() -> None:
    events = lifecycle().stored()
    steps = list(replay.replay_steps(events, VM1))
    doc = history.history_document(VM1, events)
    out = doc["steps"]
    assert doc["apiVersion"] == "debug.virtstream.io/v1alpha1"
    assert [s["seq"] for s in out] == sorted(s["seq"] for s in out)
    by_seq = {s["seq"]: s for s in out}
    linked = [s for s in out if s["causedBy"] is not None]
    assert linked, "the scenario's events name their causes"
    for s in linked:
        assert s["seq"] in by_seq[s["causedBy"]]["caused"]
        assert s["causationId"] == by_seq[s["causedBy"]]["eventId"]
    for s, step in zip(out, steps, strict=True):
        assert ("object" in s) == bool(step.changes)
        if "object" in s:
            assert s["object"] == step.rendered
    assert out[0]["type"] == "VMCreated" and out[0]["object"]["metadata"]["name"] == "vm1"
    # extended in two parts, as the api brings a kept history up to date: the same document
    for cut in (1, len(events) // 2, len(events) - 1):
        parts = history.History(VM1).extend(events[:cut]).extend(events[cut:])
        assert parts.document() == doc, cut


def test_a_browsers_websocket_token_is_read_and_taken_out_of_the_protocols() -> None:
    b64 = base64.urlsafe_b64encode(b"s3cret-token").decode().rstrip("=")
    offered = [f"{WEBSOCKET_BEARER}{b64}", "plain.kubevirt.io"]
    assert websocket_bearer(offered) == ("Bearer s3cret-token", ["plain.kubevirt.io"])
    assert websocket_bearer(["plain.kubevirt.io"]) == ("", ["plain.kubevirt.io"])
    assert websocket_bearer([f"{WEBSOCKET_BEARER}%%%"])[0] == "Bearer -"  # refused, not anonymous


def test_viewers_may_read_history_why_and_prometheus_and_anyone_the_files() -> None:
    base = "/apis/debug.virtstream.io/v1alpha1"
    for path in (
        f"{base}/namespaces/default/virtualmachines/vm1/history",
        f"{base}/namespaces/default/virtualmachineinstances/vm1/why",
        "/prometheus/api/v1/query_range",
    ):
        assert allowed(VERA, attributes("GET", path), VIEWERS, ROLES), path
    assert not allowed(VERA, attributes("GET", f"{base}/nodes/node-1/history"), VIEWERS, ROLES)
    assert not allowed(VERA, attributes("POST", "/prometheus/api/v1/query"), VIEWERS, ROLES)
    anonymous = User(ANONYMOUS, (UNAUTHENTICATED,))
    for path in ("/ui", "/ui/", "/ui/js/main.js", "/ui/vms/default/vm1"):
        assert allowed(anonymous, attributes("GET", path), (), ROLES), path
    assert not allowed(anonymous, attributes("GET", "/prometheus/api/v1/query"), (), ROLES)
    history_path = f"{base}/namespaces/default/virtualmachines/vm1/history"
    assert not allowed(anonymous, attributes("GET", history_path), (), ROLES)


def test_the_histories_diff_skips_equal_subtrees_and_finds_the_same_changes() -> None:
    def full(before: dict | None, after: dict | None) -> list[replay.FieldChange]:
        a: dict = {}
        b: dict = {}
        replay._flatten(before or {}, "", a)
        replay._flatten(after or {}, "", b)
        skip = set(replay.NOISE)
        out = [replay.FieldChange(p, a.get(p), v) for p, v in b.items() if a.get(p) != v]
        out += [replay.FieldChange(p, v, None) for p, v in a.items() if p not in b]
        return [c for c in out if c.path not in skip]

    renders: list[dict | None] = [None]
    for kind in (Kind.VM, Kind.VMI):
        agg = Aggregate(kind=kind, namespace="default", name="vm1")
        renders += [st.rendered for st in replay.replay_steps(lifecycle().stored(), agg)]
    for before in renders:
        for after in renders:
            assert replay.diff_objects(before, after) == full(before, after)
