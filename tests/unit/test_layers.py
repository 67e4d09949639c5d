"""The layering the architecture promises, checked on the source: pure packages import no
I/O, no clock and no adapter; the application core sits below the kinds and the kinds below
the services; the client and the read side load no server code; the project's modules form
no import cycle."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# the modules that must stay pure: folds, deciders, views, the contract
PURE = [
    "events/*.py",
    "projections/*.py",
    "core/*.py",
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
    "httptools",
    "httpx",
    "libvirt",
    "libvirtaio",
    "litestar",
    "nats",
    "prometheus_client",
    "readside",
    "socket",
    "structlog",
    "subprocess",
    "time",
    "uvicorn",
    "websockets",
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


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def project_graph() -> dict[str, set[str]]:
    """Every module of the project's packages (each top-level directory with an
    `__init__.py`: the services, the tools, the benchmarks, the tests) and the project's
    modules it imports, wherever in the file (a lazy import is an import too)."""
    paths = {
        module_name(p): p
        for top in sorted(REPO.iterdir())
        if (top / "__init__.py").is_file()
        for p in top.rglob("*.py")
    }
    graph: dict[str, set[str]] = {}
    for mod, path in paths.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the importing module's package
                    pkg = mod.split(".")[: None if path.name == "__init__.py" else -1]
                    base = ".".join([*pkg[: len(pkg) - node.level + 1], *filter(None, [base])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base
                           for a in node.names]  # fmt: skip
            else:
                continue
            for target in targets:
                while target and target not in paths:  # an attribute of a module
                    target = target.rpartition(".")[0]
                if target and target != mod:
                    deps.add(target)
        graph[mod] = deps
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


def test_no_import_cycles_among_the_projects_modules() -> None:
    graph = project_graph()
    assert "bench.bench_exec" in graph and "core.commands" in graph  # it sees them all
    assert find_cycle(graph) is None


def _imports_under(graph: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    return {m: deps for m, deps in graph.items() if m == package or m.startswith(f"{package}.")}


def test_the_core_sits_below_the_kinds_and_the_kinds_below_the_services() -> None:
    """events < projections < core < kinds < services: the application core reads a kind
    through its own protocol (`core.kind.KindRules`), never the registry."""
    graph = project_graph()
    below_core = ("events", "projections", "core")
    for mod, deps in _imports_under(graph, "core").items():
        bad = {d for d in deps if d.split(".")[0] not in below_core}
        assert not bad, f"{mod} imports {sorted(bad)}"
    for mod, deps in _imports_under(graph, "kinds").items():
        bad = {d for d in deps if d.split(".")[0] == "services"}
        assert not bad, f"{mod} imports {sorted(bad)}"


def test_the_client_and_the_read_side_load_no_server_code() -> None:
    graph = project_graph()
    for package in ("client", "readside"):
        todo, seen = list(_imports_under(graph, package)), set[str]()
        while todo:
            mod = todo.pop()
            if mod not in seen:
                seen.add(mod)
                todo.extend(graph[mod])
                parent = mod.rpartition(".")[0]  # importing a module runs its package's init
                todo.extend([parent] if parent in graph else [])
        server = sorted(m for m in seen if m.split(".")[0] == "services")
        assert not server, f"{package}/ loads {server}"
