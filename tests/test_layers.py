"""The house's floors, enforced. The pure rooms (URL normalization, robots matching,
parsing, fingerprints, simhash, delay rules) import neither Redis nor Celery: they are
unit-tested and reused alone. And every room (a folder of ``crawler_tasks``, or a module
at its top) stands on one floor: a module imports only its own room and the rooms on
floors below, so no arrow runs up and no two rooms import each other; within a room no
modules import each other in a circle either (imports made only for type checking or
inside a function count: they are arrows too)."""
from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PURE = ["crawler_tasks.urls", "crawler_tasks.robots", "crawler_tasks.parse.page", "crawler_tasks.parse.pdf",
        "crawler_tasks.fetch.proxy", "crawler_tasks.urls.sites",
        "crawler_tasks.parse.sandbox",
        "crawler_tasks.parse.sitemaps", "crawler_tasks.dedup.fingerprint", "crawler_tasks.dedup.simhash",
        "crawler_tasks.dedup.dust", "crawler_tasks.dedup.evidence", "crawler_tasks.dedup.minhash",
        "crawler_tasks.fetch.politeness", "crawler_tasks.fetch.dns", "crawler_tasks.fetch.addresses",
        "crawler_tasks.freshness.rate",
        "crawler_tasks.freshness.allocate", "crawler_tasks.freshness.policy", "crawler_tasks.ops.messages"]

# Top floor first. A page's walk goes down them: tasks -> stages (fetch session, parse,
# enqueue) -> the components; the operator's tools (ops/) stand above the stages they
# start, runtime control (runtime/) below the stages that use it.
FLOORS: list[set[str]] = [
    {"tasks"},                                  # the Celery tasks: validate, call a stage, hand on
    {"ops"},                                    # the operator's tools: runner, child, reports, snapshots
    {"celery"},                                 # the Celery app
    {"schedule", "stages"},                     # Beat entries; the stages
    {"runtime"},                                # crawl state and counters, nodes, maintenance, latency
    {"output", "render", "robots"},
    {"parse"},
    {"dedup"},
    {"frontier"},
    {"fetch", "freshness", "urls"},
    {"broker", "connection"},                   # the Celery broker's transport and messages; Redis clients
    {"counters", "keys", "queues", "records", "settings"},
    {"exceptions", "crawler_tasks"},            # the error tree; the package's face (its version)
]
PACKAGE = Path(__file__).resolve().parent.parent / "crawler_tasks"


@pytest.mark.parametrize("module", PURE)
def test_pure_module_imports_no_redis_or_celery(module: str) -> None:
    code = f"import sys, {module}; print(sorted(m for m in ('redis', 'celery', 'kombu') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    """The package's modules that ``name`` imports (a name imported from a package
    counts as its submodule when there is one)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target


def _room(module: str) -> str:
    return module.split(".")[1] if "." in module else module


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: set(_imports(name, path, modules)) for name, path in modules.items()}


def test_every_room_has_a_floor() -> None:
    placed = set().union(*FLOORS)
    assert {_room(m) for m in _modules()} <= placed, "place the new room on a floor in FLOORS"
    assert sum(len(f) for f in FLOORS) == len(placed), "a room stands on one floor"


def test_no_arrow_runs_up() -> None:
    floor = {room: i for i, rooms in enumerate(FLOORS) for room in rooms}
    up = sorted(f"{a} -> {b}" for a, targets in _graph().items() for b in targets
                if _room(a) != _room(b) and floor[_room(b)] <= floor[_room(a)])
    assert up == []


def test_no_circle() -> None:
    graph = _graph()
    state: dict[str, int] = {}   # 1: on the current path, 2: done
    circles = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                circles.append(" -> ".join([*path[path.index(target):], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert circles == []


def test_the_floor_test_sees_arrows() -> None:
    """The parser finds what the rules are about: a relative, a lazy and a type-only import."""
    graph = _graph()
    assert "crawler_tasks.stages.fetch.context" in graph["crawler_tasks.stages.fetch.robots_step"]
    assert "crawler_tasks.runtime.maintenance" in graph["crawler_tasks.ops.child"]   # inside a function
    assert "crawler_tasks.stages.fetch.outcome" in graph["crawler_tasks.stages.fetch.render_step"]   # TYPE_CHECKING
