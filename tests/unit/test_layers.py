"""The layering the architecture promises, checked on the source: pure packages import no
I/O, no clock and no adapter; service packages form no import cycle."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# the modules that must stay pure: folds, deciders, views, the contract
PURE = [
    "events/*.py",
    "projections/*.py",
    "services/controller/*.py",
    "services/launcher/lifecycle.py",
    "services/handler/state.py",
    "services/handler/planner.py",
    "services/handler/decider.py",
    "services/handler/effects.py",
    "services/handler/migration.py",
    "services/handler/migration_source.py",
    "services/handler/migration_sim.py",
    "services/handler/volumes.py",
]
# their shells and entry points, which do the I/O
SHELLS = {"services/controller/service.py", "services/controller/__main__.py"}

FORBIDDEN_MODULES = {
    "asyncio",
    "eventstore",
    "httpx",
    "libvirt",
    "libvirtaio",
    "nats",
    "prometheus_client",
    "readside",
    "socket",
    "structlog",
    "subprocess",
    "time",
}
FORBIDDEN_CALLS = {"uuid4", "uuid1", "utcnow", "getrandom", "urandom"}


def pure_modules() -> list[Path]:
    out: set[Path] = set()
    for pattern in PURE:
        out.update(p for p in REPO.glob(pattern) if str(p.relative_to(REPO)) not in SHELLS)
    return sorted(out)


def imported(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


@pytest.mark.parametrize("path", pure_modules(), ids=lambda p: str(p.relative_to(REPO)))
def test_pure_modules_do_no_io_and_read_no_clock(path: Path) -> None:
    tree = ast.parse(path.read_text())
    bad = {m for m in imported(tree) if m.split(".")[0] in FORBIDDEN_MODULES}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        # `ctx.now` is the clock a shell hands in; datetime.now() reads the clock
        clock = node.attr == "now" and ast.unparse(node.value) in ("dt.datetime", "datetime")
        if node.attr in FORBIDDEN_CALLS or clock:
            bad.add(ast.unparse(node))
    assert not bad, f"{path.relative_to(REPO)} imports or calls {sorted(bad)}"


def import_graph(package: str) -> dict[str, set[str]]:
    prefix = package.replace("/", ".")
    graph: dict[str, set[str]] = {}
    for path in (REPO / package).glob("*.py"):
        mod = f"{prefix}.{path.stem}"
        graph[mod] = {
            m for m in imported(ast.parse(path.read_text())) if m.startswith(prefix + ".")
        }
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return [*stack[stack.index(m) :], m]
            if m not in state and (c := visit(m)):
                return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (c := visit(n)):
            return c
    return None


@pytest.mark.parametrize(
    "package",
    [
        "events",
        "eventstore",
        "kinds",
        "projections",
        "readside",
        "services/controller",
        "services/runtime",
        "services/handler",
        "services/launcher",
        "services/api",
    ],
)
def test_no_import_cycles(package: str) -> None:
    assert find_cycle(import_graph(package)) is None
