"""The published contract, as JSON Schema generated from the msgspec Structs: every event
type (one file per tag: the tag is the version, `NodeJoined/v2` → `NodeJoined.v2.json`),
their union, and the intents' request bodies (the objects a create or update takes, the
subresources' options).

    python -m events.schema --out docs/events      # write
    python -m events.schema --out docs/events --check   # exit 1 when out of date
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path
from typing import Any, Literal, get_args

import msgspec

from events import objects
from events.catalog import AnyEvent

JSON = dict[str, Any]


class StartOptions(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    """The body of `start` (KubeVirt's v1.StartOptions)."""

    paused: bool = False


class StopOptions(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    """The body of `stop` and `restart`: how long the guest may take to shut down."""

    grace_period: int | None = None
    grace_period_seconds: int | None = None


class MigrateOptions(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    """The body of `migrate`: extra node selector terms for the target."""

    added_node_selector: dict[str, str] | None = None


class Preconditions(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    """What the object must still be for a delete to go ahead (409 otherwise)."""

    uid: str | None = None
    resource_version: str | None = None


class DeleteOptions(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    """The body of `delete` (the API server's DeleteOptions, the fields honoured here)."""

    grace_period_seconds: int | None = None
    propagation_policy: Literal["Foreground", "Background"] | None = None
    preconditions: Preconditions | None = None


# what each verb's request body is (pause, unpause and softreboot read none)
INTENTS: dict[str, type[Any]] = {
    "VirtualMachine": objects.VirtualMachine,
    "VirtualMachineInstance": objects.VirtualMachineInstance,
    "VirtualMachineInstanceMigration": objects.VirtualMachineInstanceMigration,
    "MigrationPolicy": objects.MigrationPolicy,
    "Node": objects.Node,
    "StartOptions": StartOptions,
    "StopOptions": StopOptions,
    "MigrateOptions": MigrateOptions,
    "DeleteOptions": DeleteOptions,
}


def event_types() -> list[type[Any]]:
    return sorted(get_args(AnyEvent), key=lambda t: t.__name__)


def tag(event_type: type[Any]) -> str:
    return str(event_type.__struct_config__.tag)


def file_name(tag_: str) -> str:
    return tag_.replace("/", ".") + ".json"


def _schema(t: Any) -> JSON:
    return _cleaned(msgspec.json.schema(t))


def _cleaned(node: Any) -> Any:
    """Descriptions dedented here, not by msgspec: its releases differ on whether they
    dedent docstrings, and the files must not change with the installed version."""
    if isinstance(node, dict):
        return {
            k: inspect.cleandoc(v) if k == "description" and isinstance(v, str) else _cleaned(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_cleaned(v) for v in node]
    return node


def documents() -> dict[str, JSON]:
    """Relative path → schema. Pure: the same Structs give the same files."""
    docs: dict[str, JSON] = {}
    index: JSON = {"events": {}, "intents": {}}
    for t in event_types():
        path = f"events/{file_name(tag(t))}"
        docs[path] = {"title": tag(t), **_schema(t)}
        index["events"][tag(t)] = path
    docs["events.schema.json"] = {"title": "any event", **_schema(AnyEvent)}
    for name, body in INTENTS.items():
        path = f"intents/{name}.json"
        docs[path] = {"title": name, **_schema(body)}
        index["intents"][name] = path
    docs["index.json"] = index
    return docs


def render(doc: JSON) -> bytes:
    return msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n"


def write(out: Path) -> list[Path]:
    written = []
    for rel, doc in documents().items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(render(doc))
        written.append(path)
    return written


def stale(out: Path) -> list[str]:
    """The files that differ from what the Structs give (missing ones included)."""
    return [
        rel
        for rel, doc in documents().items()
        if not (out / rel).is_file() or (out / rel).read_bytes() != render(doc)
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m events.schema")
    p.add_argument("--out", type=Path, default=Path("docs/events"))
    p.add_argument("--check", action="store_true", help="exit 1 when the files are out of date")
    args = p.parse_args(argv)
    if args.check:
        bad = stale(args.out)
        for rel in bad:
            print(f"out of date: {args.out / rel}", file=sys.stderr)
        return 1 if bad else 0
    print(f"wrote {len(write(args.out))} schemas to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
