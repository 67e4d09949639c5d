"""kubectl's client-side apply, pure: the last-applied annotation and the three-way merge.

`kubectl apply` keeps the configuration it applied in the object's
`kubectl.kubernetes.io/last-applied-configuration` annotation and, on the next apply,
sends a JSON merge patch (KubeVirt's kinds are custom resources, so no strategic merge)
built from three documents (k8s.io/apimachinery's `CreateThreeWayJSONMergePatch`):

- every field of the new configuration whose value differs from the live object's (set
  to the configuration's value: a field the configuration names always ends as it says);
- every field the last applied configuration had and the new one has not (deleted);
- nothing else: a field neither configuration names (set by a controller, a
  subresource, `kubectl label`) is left as it is.

An empty patch is not sent (`unchanged`). The annotation is written the way kubectl
writes it (Go's JSON: sorted keys, no spaces, `<`, `>`, `&` escaped, a final newline;
`metadata.annotations` present, the namespace set), so kubectl and this client read each
other's annotation and agree on what is unchanged."""

from __future__ import annotations

import copy
import json
from typing import Any

JSON = dict[str, Any]
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
MISSING = (
    "resource {resource} is missing the kubectl.kubernetes.io/last-applied-configuration "
    "annotation which is required by kubectl apply. kubectl apply should only be used on "
    "resources created declaratively by either kubectl create --save-config or kubectl "
    "apply. The missing annotation will be patched automatically."
)


def go_json(obj: Any) -> str:
    """`obj` as kubectl's encoder writes it (Go's encoding/json on an unstructured map)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                          ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):  # fmt: skip
        text = text.replace(char, escaped)
    return text + "\n"


def modified(config: JSON, namespace: str | None) -> JSON:
    """The configuration as kubectl sends it: its namespace set (a namespaced kind), and
    the annotation holding the configuration itself (without the annotation)."""
    doc = copy.deepcopy(config)
    meta = doc.setdefault("metadata", {})
    if namespace is not None and not meta.get("namespace"):
        meta["namespace"] = namespace
    annotations = meta.get("annotations")
    annotations = dict(annotations) if isinstance(annotations, dict) else {}
    annotations.pop(LAST_APPLIED, None)
    meta["annotations"] = annotations
    text = go_json(doc)
    meta["annotations"] = {**annotations, LAST_APPLIED: text}
    return doc


def original(current: JSON) -> JSON | None:
    """The configuration last applied to the live object (None: none recorded)."""
    annotations = (current.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(LAST_APPLIED) if isinstance(annotations, dict) else None
    if not text:
        return None
    try:
        found = json.loads(text)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def merge_patch(before: Any, after: Any) -> Any:
    """RFC 7386's patch from `before` to `after` (objects compared key by key, anything
    else replaced whole; a key `after` lacks is null)."""
    if not isinstance(before, dict) or not isinstance(after, dict):
        return after
    patch: JSON = {}
    for key, value in after.items():
        if key not in before:
            patch[key] = value
        elif before[key] != value:
            if isinstance(value, dict) and isinstance(before[key], dict):
                patch[key] = merge_patch(before[key], value)
            else:
                patch[key] = value
    for key in before:
        if key not in after:
            patch[key] = None
    return patch


def _filtered(patch: JSON, keep_null: bool) -> JSON:
    """Only the deletions (keep_null) or only the additions and changes of a patch; an
    object left empty is dropped, an empty object set on purpose is a value."""
    out: JSON = {}
    for key, value in patch.items():
        if value is None:
            if keep_null:
                out[key] = None
        elif isinstance(value, dict):
            if not value:
                if not keep_null:
                    out[key] = value
                continue
            sub = _filtered(value, keep_null)
            if sub:
                out[key] = sub
        elif not keep_null:
            out[key] = value
    return out


def _merged(deletions: JSON, changes: JSON) -> JSON:
    out = dict(deletions)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def three_way(last: JSON | None, config: JSON, current: JSON) -> JSON:
    """The merge patch kubectl sends: the configuration's additions and changes against
    the live object, plus the deletions since the last applied configuration."""
    changes = _filtered(merge_patch(current, config), keep_null=False)
    deletions = _filtered(merge_patch(last, config), keep_null=True) if last else {}
    return _merged(deletions, changes)
