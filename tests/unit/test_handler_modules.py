"""The handler's modules: no import cycle among them, and the decider's modules import
nothing that does I/O (the fleet and the service are the only effectful ones)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PACKAGE = "services.handler"
PURE = {"state", "planner", "effects", "migration", "migration_source", "migration_sim", "reactor"}
EFFECTFUL = ("asyncio", "nats", "libvirt", "time", "uuid", "random", "socket", "subprocess", "os")
EFFECTFUL_HERE = ("eventstore", "services.launcher.client", "services.launcher.zygote")


def imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth (TYPE_CHECKING blocks and functions too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def graph() -> dict[str, set[str]]:
    pkg = REPO / "services" / "handler"
    modules = {p.stem for p in pkg.glob("*.py") if p.stem != "__init__"}
    return {
        m: {i.removeprefix(f"{PACKAGE}.") for i in imports(pkg / f"{m}.py")} & modules
        for m in modules
    }


def test_no_import_cycle_among_the_handler_modules() -> None:
    edges = graph()

    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = list(edges[start])
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo += edges[m]
        return seen

    cycles = sorted(m for m in edges if m in reach(m))
    assert cycles == [], f"import cycles through {cycles}"


def test_the_decider_modules_do_no_io() -> None:
    pkg = REPO / "services" / "handler"
    for m in sorted(PURE):
        found = imports(pkg / f"{m}.py")
        bad = sorted(
            i for i in found if i.split(".")[0] in EFFECTFUL or i.startswith(EFFECTFUL_HERE)
        )
        assert bad == [], f"{m} imports {bad}"
        assert not {f"{PACKAGE}.fleet", f"{PACKAGE}.service"} & found, m
