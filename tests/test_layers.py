"""The engine's layers: every import arrow points down (a sub-package imports only those below it, as each
sub-package's docstring says) and no group of modules imports itself round in a circle.

The arrows are read from the source (``ast``), function-level imports included, so a lazy import cannot hide
a cycle.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ENGINE_DIR = Path(__file__).resolve().parents[1] / "engine"
LAYERS = ("scenario", "hardware", "sim", "calibrate", "decide", "teach")  # bottom up
TOP = "engine"  # the package itself: the command line and the entry points, above every layer


def module_name(path: Path) -> str:
    parts = path.relative_to(ENGINE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The engine modules ``path`` imports (``from .x import y`` counts ``y`` when it is a module itself)."""
    here = module_name(path)
    package = here if path.stem == "__init__" else here.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == TOP}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != TOP:
                continue
            children = {f"{target}.{a.name}" for a in node.names} & known
            found |= children or {target}
    return found - {here}


def engine_graph() -> dict[str, set[str]]:
    paths = sorted(ENGINE_DIR.rglob("*.py"))
    known = {module_name(p) for p in paths}
    return {module_name(p): imported_modules(p, known) & known for p in paths}


def layer_of(module: str) -> int:
    """The layer's rank (0 at the bottom); the top package's own modules rank above every layer."""
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else len(LAYERS)


def upward_arrows(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                  if layer_of(b) > layer_of(a) or (b == TOP and a != TOP))


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


# Package __init__ modules import nothing but the top package's (which re-exports the main entry points).
PACKAGE_ROOTS = {f"{TOP}.{layer}" for layer in LAYERS}


def test_every_engine_module_sits_in_a_layer():
    loose = sorted(m for m in engine_graph() if m.count(".") == 1 and m not in PACKAGE_ROOTS
                   and m not in (f"{TOP}.cli", f"{TOP}.__main__"))
    assert not loose, f"modules outside a layer: {loose}"


def test_no_import_points_up():
    assert upward_arrows(engine_graph()) == []


def test_no_import_cycle():
    graph = {m: {t for t in targets if t not in PACKAGE_ROOTS | {TOP}} for m, targets in engine_graph().items()}
    assert cycles(graph) == []


def test_layer_docstrings_name_what_they_may_import():
    for rank, layer in enumerate(LAYERS):
        doc = importlib.import_module(f"{TOP}.{layer}").__doc__ or ""
        assert doc.strip(), f"engine/{layer}/__init__.py has no docstring"
        below = LAYERS[:rank]
        assert all(name in doc for name in below), f"engine.{layer}'s docstring omits a layer it may import"
        assert not any(f"``engine.{name}``" in doc for name in LAYERS[rank + 1:]), layer


@pytest.mark.parametrize("graph, arrows, groups", [
    ({"engine.sim.a": {"engine.decide.b"}, "engine.decide.b": set()}, ["engine.sim.a -> engine.decide.b"], []),
    ({"engine.sim.a": {"engine.sim.b"}, "engine.sim.b": {"engine.sim.c"}, "engine.sim.c": {"engine.sim.a"}},
     [], [["engine.sim.a", "engine.sim.b", "engine.sim.c"]]),
    ({"engine.decide.a": {"engine.sim.b", "engine.scenario.c"}, "engine.sim.b": {"engine.scenario.c"},
      "engine.scenario.c": set()}, [], []),
    ({"engine.scenario.a": {"engine"}}, ["engine.scenario.a -> engine"], []),
])
def test_the_checks_catch_what_they_look_for(graph, arrows, groups):
    assert upward_arrows(graph) == arrows
    assert cycles(graph) == groups


def test_relative_imports_are_resolved():
    graph = engine_graph()
    assert {"engine.sim.kernel", "engine.sim.stopping", "engine.scenario.config"} <= graph["engine.sim.simulate"]
    assert "engine.hardware.calibration_store" in graph["engine.hardware.roofline"]
