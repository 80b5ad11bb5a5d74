"""The product's import graph: no circles, a runtime that knows no model, Ray in one room.

Read with the standard ``ast`` module, so the check needs no import to succeed
and also sees imports inside functions and ``TYPE_CHECKING`` blocks: a circle
hidden behind a lazy import is still a circle a reader must untangle.

Run it alone as a script (``python tests/test_import_graph.py``) to print the
graph's circles and the runtime's model imports, or under pytest.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("runtime", "voice_server")
# The model-agnostic runtime: every module of runtime/ outside runtime/models/.
MODELS_PACKAGE = "runtime.models"
STAGE_NAMES = {"LISTEN", "THINK", "SPEAK", "STAGES", "LISTEN_RATE_HZ"}
# The Ray backend's room: the only package that may import ``ray``, in the product, its
# tests and its benchmarks alike (they build clusters through runtime.ray.local_cluster).
RAY_ROOM = "runtime/ray"
RAY_CHECKED = ("runtime", "voice_server", "tests", "benchmarks")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def product_modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The product module ``name`` lives in (a name may be a module's attribute)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, set[str]]]:
    """(imported product module, names taken from it) for every import statement."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _resolve(alias.name, modules)
                if target:
                    out.append((target, set()))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                # "from pkg import sub" imports the submodule when there is one.
                target = _resolve(f"{base}.{alias.name}", modules) if f"{base}.{alias.name}" in modules else _resolve(base, modules)
                if target:
                    out.append((target, {alias.name}))
    return out


def graph() -> tuple[dict[str, set[str]], dict[str, list[tuple[str, set[str]]]]]:
    modules = product_modules()
    raw = {m: imports_of(m, p, modules) for m, p in modules.items()}
    edges = {m: {t for t, _ in imps if t != m} for m, imps in raw.items()}
    return edges, raw


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def model_imports_in_runtime(raw: dict[str, list[tuple[str, set[str]]]]) -> list[str]:
    """Imports of model code or stage names by runtime modules outside runtime/models/."""
    bad = []
    for module, imps in sorted(raw.items()):
        if not module.startswith("runtime") or module.startswith(MODELS_PACKAGE):
            continue
        for target, names in imps:
            if target.startswith(MODELS_PACKAGE):
                bad.append(f"{module} imports {target}")
            elif names & STAGE_NAMES:
                bad.append(f"{module} imports {sorted(names & STAGE_NAMES)} from {target}")
    return bad


def imports_ray(source: str, filename: str = "<source>") -> bool:
    """Whether ``source`` imports the ``ray`` package or one of its modules, anywhere in it."""
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "ray" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "ray":
            return True
    return False


def ray_imports_outside_its_room() -> list[str]:
    """Files outside runtime/ray/ that import ``ray``."""
    room = ROOT / RAY_ROOM
    return [str(path.relative_to(ROOT)) for folder in RAY_CHECKED for path in sorted((ROOT / folder).rglob("*.py"))
            if room not in path.parents and imports_ray(path.read_text(), str(path))]


def test_the_product_has_no_import_circles():
    edges, _ = graph()
    assert cycles(edges) == []


def test_the_runtime_outside_models_imports_no_model_and_no_stage_name():
    _, raw = graph()
    assert model_imports_in_runtime(raw) == []


def test_only_the_ray_room_imports_ray():
    assert ray_imports_outside_its_room() == []


def test_the_ray_check_sees_every_form_of_import():
    for source in ("import ray", "import ray.util as u", "from ray.exceptions import RayError",
                   "def f():\n    import ray\n", "import os, ray"):
        assert imports_ray(source), source
    for source in ("from runtime.ray import cluster", "from . import ray", "import rays", "x = 'import ray'"):
        assert not imports_ray(source), source


def test_every_product_module_imports():
    # In a fresh interpreter, so no test's imports hide a module that fails alone.
    import subprocess
    names = sorted(product_modules())
    code = "import importlib, sys\nfor n in sys.argv[1:]:\n    importlib.import_module(n)\n"
    run = subprocess.run([sys.executable, "-c", code, *names], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]


def test_the_check_sees_a_circle_and_a_model_import():
    # The checker itself can fail: a made-up graph with a circle and a bad import.
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    raw = {"runtime.coordinator": [("runtime.models.voice_contract", {"THINK"})],
           "runtime.models.listen.executor": [("runtime.models.voice_contract", {"LISTEN"})]}
    assert model_imports_in_runtime(raw) == ["runtime.coordinator imports runtime.models.voice_contract"]


if __name__ == "__main__":
    edges, raw = graph()
    problems = ([" <-> ".join(c) for c in cycles(edges)] + model_imports_in_runtime(raw)
                + [f"{f} imports ray outside {RAY_ROOM}/" for f in ray_imports_outside_its_room()])
    print("\n".join(problems) or f"{len(edges)} modules: no circles, no model imports in the runtime")
    sys.exit(1 if problems else 0)
