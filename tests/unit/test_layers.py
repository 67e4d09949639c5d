"""The layering the architecture promises, checked on the source and on what an import
really loads: pure modules import no I/O, no clock and no adapter, not even through the
modules they import; the application core sits below the kinds and the kinds below the
services; the client and the read side load no server code; the project's modules form no
import cycle."""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# The pure parts: the folds, deciders, views, kinds and the contract. A package counts with
# every module in it but the shells named beside it; a module counts alone.
PURE_PACKAGES: dict[str, frozenset[str]] = {
    "events": frozenset(),
    "projections": frozenset(),
    "core": frozenset(),  # the application core: the commands, admission, names, errors
    "kinds": frozenset(),
    "services/controller": frozenset({"service.py", "__main__.py"}),
}
PURE_MODULES = (
    "services/launcher/lifecycle.py",
    "services/runtime/reactor.py",  # the deciders' ports: imported by every pure decider
    "services/handler/state.py",
    "services/handler/planner.py",
    "services/handler/reactor.py",
    "services/handler/effects.py",
    "services/handler/node_info.py",
    "services/handler/migration.py",
    "services/handler/migration_source.py",
    "services/handler/migration_sim.py",
    "services/handler/volumes.py",
    "services/handler/imports.py",
    "services/handler/reclaim.py",
)

# Loaded by a pure module, directly or through any module it imports, these are a bug: the
# bus, libvirt, the web stack, HTTP clients, the adapters, the shells' instruments and the
# event loop.
ADAPTERS = frozenset(
    {
        "nats",
        "libvirt",
        "libvirtaio",
        "libvirtmod",
        "litestar",
        "uvicorn",
        "httptools",
        "websockets",
        "httpx",
        "httpcore",
        "uvloop",
        "eventstore",
        "readside",
        "prometheus_client",
        "structlog",
        # the event loop and what it brings: a decider that loads them can wait or do I/O
        "asyncio",
        "socket",
        "ssl",
        "subprocess",
        "threading",
    }
)
# Imported by a pure module itself (what it loads through others is ADAPTERS' concern).
FORBIDDEN_MODULES = ADAPTERS | {"asyncio", "socket", "subprocess", "time"}
# Named anywhere in the code a pure module loads: fresh ids and the clock come in through
# a Context (or an explicit `now`), never from the process.
FORBIDDEN_CALLS = {"uuid4", "uuid1", "getrandom", "urandom"}
CLOCKS = {
    "time": {"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns"},
    "datetime": {"now", "utcnow", "today"},
    "date": {"today"},
}


def pure_paths() -> list[Path]:
    out: set[Path] = set()
    for package, shells in PURE_PACKAGES.items():
        out.update(p for p in (REPO / package).glob("*.py") if p.name not in shells)
    out.update(REPO / m for m in PURE_MODULES)
    return sorted(out)


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def clock_reads(tree: ast.AST) -> set[str]:
    """Every place the code names the process clock or a fresh id: `time.time`,
    `dt.datetime.now`, `date.today`, `from time import monotonic`, `uuid4`."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            owner = ast.unparse(node.value).rsplit(".", 1)[-1]
            if node.attr in CLOCKS.get(owner, ()) or node.attr in FORBIDDEN_CALLS:
                found.add(ast.unparse(node))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = CLOCKS.get(node.module, set()) | FORBIDDEN_CALLS
            found.update(f"{node.module}.{a.name}" for a in node.names if a.name in names)
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_CALLS:
            found.add(node.id)
    return found


@pytest.mark.parametrize("path", pure_paths(), ids=lambda p: str(p.relative_to(REPO)))
def test_pure_modules_do_no_io_and_read_no_clock(path: Path) -> None:
    tree = ast.parse(path.read_text())
    bad = {m for m in imported(tree) if m.split(".")[0] in FORBIDDEN_MODULES}
    bad |= clock_reads(tree)
    assert not bad, f"{path.relative_to(REPO)} imports or calls {sorted(bad)}"


# Who may import nats outside the event log's adapters (eventstore/): the processes' entry
# points, which connect (every `__main__`, `virtstream up` and `serve`, the debug commands'
# connection), and the NATS transport of the api's intents. Everyone else takes the
# `EventLog` port and its errors.
NATS_IMPORTERS = {"cli/up.py", "cli/serve.py", "cli/debug.py", "services/api/nats_endpoints.py"}
NOT_SHIPPED = {"tests", "bench", "examples", "docs"}


def project_modules() -> list[Path]:
    tops = [
        d
        for d in REPO.iterdir()
        if d.is_dir() and not d.name.startswith(".") and d.name not in NOT_SHIPPED
    ]
    return sorted(p for d in tops for p in d.rglob("*.py"))


def test_only_the_log_adapters_entry_points_and_nats_transports_import_nats() -> None:
    modules = project_modules()
    assert REPO / "services/runtime/shell.py" in modules  # the walk finds the project
    bad = [
        rel
        for path in modules
        if (rel := str(path.relative_to(REPO))).split("/")[0] != "eventstore"
        and path.name != "__main__.py"
        and rel not in NATS_IMPORTERS
        and any(m.split(".")[0] == "nats" for m in imported(ast.parse(path.read_text())))
    ]
    assert not bad, f"import nats, outside the event log's adapters: {bad}"


# Run in a fresh interpreter: imports every pure module, reports the packages that got
# loaded and the project's modules among them, and for each adapter the chain of imports
# that brought it in.
_PROBE = """
import builtins, importlib, json, sys
modules, watched = json.loads(sys.argv[1]), set(json.loads(sys.argv[2]))
chains, stack, real_import = {}, [], builtins.__import__

def traced(name, globals=None, locals=None, fromlist=(), level=0):
    top = name.split(".")[0]
    if top in watched and top not in chains and not level:
        chains[top] = [*stack, (globals or {}).get("__name__", "?"), name]
    stack.append((globals or {}).get("__name__", "?"))
    try:
        return real_import(name, globals, locals, fromlist, level)
    finally:
        stack.pop()

builtins.__import__ = traced
for m in modules:
    importlib.import_module(m)
files = {n: getattr(m, "__file__", None) for n, m in list(sys.modules.items())}
print(json.dumps({"loaded": sorted({n.split(".")[0] for n in files}), "chains": chains,
                  "files": {n: f for n, f in files.items() if f}}))
"""


@pytest.fixture(scope="module")
def loaded() -> dict[str, object]:
    names = [module_name(p) for p in pure_paths()]
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(names), json.dumps(sorted(ADAPTERS))],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


def test_pure_modules_load_no_adapter_even_indirectly(loaded: dict[str, object]) -> None:
    """Importing every pure module at once loads none of ADAPTERS; so no single one does."""
    found = ADAPTERS & set(loaded["loaded"])  # type: ignore[call-overload]
    chains: dict[str, list[str]] = loaded["chains"]  # type: ignore[assignment]
    assert not found, "\n".join(f"{a}: {' > '.join(chains.get(a, []))}" for a in sorted(found))


def test_no_module_a_pure_module_loads_reads_the_clock(loaded: dict[str, object]) -> None:
    """The project's modules a pure module loads, directly or not, name no clock and no
    fresh id (a clock read in a helper is a clock read in the fold that calls it)."""
    files: dict[str, str] = loaded["files"]  # type: ignore[assignment]
    ours = sorted(
        Path(f)
        for f in files.values()
        if Path(f).is_relative_to(REPO) and ".venv" not in Path(f).parts
    )
    assert any(p.parts[-2:] == ("kinds", "registry.py") for p in ours)
    bad = {
        str(p.relative_to(REPO)): sorted(reads)
        for p in ours
        if (reads := clock_reads(ast.parse(p.read_text())))
    }
    assert not bad, f"read the clock or make ids: {bad}"


def test_the_probe_sees_an_adapter_loaded_through_another_module(tmp_path: Path) -> None:
    """The transitive check catches what the source check cannot: a pure-looking module
    that imports an innocent one which loads an adapter."""
    (tmp_path / "innocent.py").write_text("import json\nimport libvirt\n")
    (tmp_path / "pure_looking.py").write_text("import innocent\n")
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(["pure_looking"]), json.dumps(["libvirt"])],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(out.stdout)
    assert "libvirt" in result["loaded"]
    assert result["chains"]["libvirt"][-3:] == ["pure_looking", "innocent", "libvirt"]


def test_the_clock_check_finds_the_usual_spellings() -> None:
    src = (
        "import time, datetime as dt\nfrom time import monotonic\nfrom uuid import uuid4\n"
        "a = time.time()\nb = dt.datetime.now(dt.UTC)\nc = dt.date.today()\nd = uuid4()\n"
        "e = dt.datetime.fromtimestamp(0)\n"
    )
    assert clock_reads(ast.parse(src)) == {
        "time.time",
        "dt.datetime.now",
        "dt.date.today",
        "time.monotonic",
        "uuid.uuid4",
        "uuid4",
    }


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


def test_the_services_import_nothing_from_ops_and_the_host_pieces_neither() -> None:
    """ops starts and supervises the services, so the arrow goes ops -> services; what a
    node does to its host (processes, the pod network) lives in `host/`, below both."""
    graph = project_graph()
    for package, banned in (("services", {"ops", "cli"}), ("host", {"ops", "cli", "services"})):
        for mod, deps in _imports_under(graph, package).items():
            bad = {d for d in deps if d.split(".")[0] in banned}
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
