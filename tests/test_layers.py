"""The layer rules of docs/architecture.md, checked on the source: who may import whom."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "lakeflow"
# The research benchmarks: a layer above the package, outside the wheel; they may import any of lakeflow.
BENCHMARKS = ROOT.parent / "benchmarks"

# layer -> lakeflow layers it may import (besides itself)
ALLOWED = {
    "errors": set(),
    "text": set(),
    "configfile": {"errors"},
    "plugins": {"errors"},
    "humaneval": {"errors"},
    "io": {"text", "errors"},
    "lake": {"text", "io", "errors"},
    "catalog": {"text", "lake", "io", "errors"},
    "lakeview": {"catalog", "lake", "io", "errors"},  # the catalog's shipped SQL and statement time limit
    "weights": {"text", "lake", "io", "errors"},
    "infra": {"lake", "errors"},
    "tracking": {"configfile", "text", "lake", "io", "errors"},
    "dataflow": {"configfile", "text", "humaneval", "catalog", "weights", "lake", "io", "errors"},
    "models": {"configfile", "text", "errors"},
    "raas": {"configfile", "text", "humaneval", "models", "weights", "lake", "io", "errors", "tracking"},
    "trainer": {"configfile", "text", "models", "weights", "lake", "io", "errors", "tracking"},
    "evaluation": {"configfile", "text", "raas", "dataflow", "lakeview", "tracking", "weights", "lake", "io", "errors"},
    "tasks": {"configfile", "text", "raas", "lake", "io", "errors"},  # repository tasks: synth, check
    "report": {"configfile", "text", "lakeview", "weights", "lake", "io", "errors"},
    "notebook": {"text", "lakeview", "dataflow", "lake", "io", "errors"},
    "run": {
        "catalog",  # the starvation rule the progress bar shows (catalog/stats.py)
        "models",
        "configfile",
        "text",
        "raas",
        "trainer",
        "dataflow",
        "evaluation",
        "tracking",
        "weights",
        "lake",
        "io",
        "errors",
    },
    "autoscale": {"text", "lake", "io", "errors"},
    "launch": {"configfile", "text", "run", "raas", "trainer", "dataflow", "weights", "lake", "io", "errors"},
    "bench": {"text", "lakeview", "weights", "lake", "io", "errors"},  # measures of the user's own setup
    "cli": {
        "tasks",
        "notebook",
        "infra",
        "evaluation",
        "tracking",
        "text",
        "configfile",
        "launch",
        "autoscale",
        "bench",
        "report",
        "run",
        "raas",
        "trainer",
        "models",
        "dataflow",
        "catalog",
        "lakeview",
        "weights",
        "lake",
        "io",
        "errors",
    },
}
# Extension points (lakeflow/plugins.py) resolve names for every layer that has a registry.
for _layer_name in (
    "tracking",
    "dataflow",
    "models",
    "raas",
    "trainer",
    "evaluation",
    "run",
    "autoscale",
    "launch",
    "bench",
    "cli",
):
    ALLOWED[_layer_name].add("plugins")
STORAGE_SDKS = {"boto3", "botocore", "fsspec", "s3fs", "moto", "aiobotocore"}
# Table formats bring their own object-store client: only the module that owns the table imports one.
TABLE_FORMATS = {"deltalake": ROOT / "lake" / "table.py"}
HEAVY = {"torch", "transformers", "vllm"}


def _layer(path: Path) -> str:
    rel = path.relative_to(ROOT)
    return rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 or rel.stem != "__init__" else "cli"


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


FILES = sorted(p for p in ROOT.rglob("*.py") if p.name != "__main__.py" and p != ROOT / "__init__.py")


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_module_respects_its_layer(path: Path) -> None:
    layer = _layer(path)
    assert layer in ALLOWED, f"{path}: folder {layer!r} is not a layer in docs/architecture.md"
    for name in _imports(path):
        top = name.split(".")[0]
        assert top != "benchmarks", f"{path} imports {name}: lakeflow never imports the checkout's benchmarks/"
        if top == "lakeflow":
            target = name.split(".")[1] if "." in name else "cli"
            assert target == layer or target in ALLOWED[layer], f"{path} imports {name} (layer {layer})"
        if top in STORAGE_SDKS:
            assert layer == "io", f"{path} imports {top}: only lakeflow/io may talk to storage SDKs"
        if top in TABLE_FORMATS:
            assert path == TABLE_FORMATS[top], f"{path} imports {top}: only {TABLE_FORMATS[top]} may (the lake's table)"
        if top in HEAVY:
            assert layer in ("models", "raas", "trainer", "bench", "cli"), (
                f"{path} imports {top}: nothing below the services imports it"
            )


def test_every_module_has_a_docstring() -> None:
    missing = [str(p) for p in FILES if ast.get_docstring(ast.parse(p.read_text())) is None]
    assert missing == []


MAX_MODULE_LINES, MAX_FUNCTION_LINES = 400, 60  # a module a newcomer reads in one sitting, a function on a screen


def test_modules_and_functions_stay_small() -> None:
    long = []
    for p in FILES:
        text = p.read_text()
        if (lines := text.count("\n")) > MAX_MODULE_LINES:
            long.append(f"{p}: {lines} lines")
        functions = [n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        for f in functions:
            if (size := (f.end_lineno or f.lineno) - f.lineno + 1) > MAX_FUNCTION_LINES:
                long.append(f"{p}:{f.lineno} {f.name}: {size} lines")
    assert long == [], "split these (docs/architecture.md): " + "; ".join(long)


BENCHMARK_FILES = sorted(BENCHMARKS.rglob("*.py"))


@pytest.mark.parametrize("path", BENCHMARK_FILES, ids=lambda p: str(p.relative_to(BENCHMARKS.parent)))
def test_benchmarks_sit_above_lakeflow(path: Path) -> None:
    """benchmarks/ may import lakeflow (any layer) and itself, never the tests; every module says what it is."""
    tree = ast.parse(path.read_text())
    assert ast.get_docstring(tree) is not None, f"{path} has no module docstring"
    for name in _imports(path):
        assert name.split(".")[0] != "tests", f"{path} imports {name}: benchmarks do not depend on the tests"


def test_the_benchmarks_are_a_package_of_the_checkout() -> None:
    assert BENCHMARK_FILES and (BENCHMARKS / "__init__.py").exists() and (BENCHMARKS / "__main__.py").exists()


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in ROOT.rglob("*.py")}


def _lakeflow_imports(path: Path) -> list[ast.ImportFrom | ast.Import]:
    """Every import statement of lakeflow modules in `path`: module level, in functions, under TYPE_CHECKING."""
    package = _module(path) if path.name == "__init__.py" else _module(path).rpartition(".")[0]
    out: list[ast.ImportFrom | ast.Import] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "lakeflow" for a in node.names):
            out.append(node)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                node.module = ".".join([*base, *([node.module] if node.module else [])])
                node.level = 0
            if (node.module or "").split(".")[0] == "lakeflow":
                out.append(node)
    return out


def _targets(node: ast.ImportFrom | ast.Import) -> set[str]:
    """The lakeflow modules an import statement loads (`from pkg import module` names the module)."""

    def owner(name: str) -> str:
        while name not in MODULES and "." in name:
            name = name.rpartition(".")[0]
        return name

    if isinstance(node, ast.Import):
        return {owner(a.name) for a in node.names}
    assert node.module is not None
    named = {f"{node.module}.{a.name}" for a in node.names}
    return {name if name in MODULES else owner(node.module) for name in named}


# The rule (docs/architecture.md): the imports among lakeflow's modules form no cycle. Every import counts:
# module level, inside a function (a lazy import hides a cycle, it does not remove it) and under
# TYPE_CHECKING. What two modules both need lives in a third that both import.
# No cycle is allowed (the list is where a temporary exception would be named, with its reason).
ALLOWED_CYCLES: list[set[str]] = []


def _cycles() -> list[list[str]]:
    graph = {m: {t for n in _lakeflow_imports(p) for t in _targets(n)} - {m} for m, p in MODULES.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles_among_lakeflow_modules() -> None:
    assert [c for c in _cycles() if set(c) not in ALLOWED_CYCLES] == []


# No private name is allowed across modules (the set is where a temporary exception would be named).
PRIVATE_ALLOWED: set[tuple[str, str]] = set()


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_uses_another_modules_private_names(path: Path) -> None:
    """`from lakeflow.x import _name`, or `x._name` on an imported lakeflow module: what several modules
    share is public and lives where its name says."""
    me = _module(path)
    modules: dict[str, str] = {}  # local name -> lakeflow module it refers to
    used = []
    for node in _lakeflow_imports(path):
        if isinstance(node, ast.Import):
            modules.update({a.asname or a.name.split(".")[0]: a.name for a in node.names})
            continue
        for a in node.names:
            if a.name.startswith("_") and not a.name.startswith("__"):
                used.append(f"{node.module}.{a.name}")
            elif f"{node.module}.{a.name}" in MODULES:
                modules[a.asname or a.name] = f"{node.module}.{a.name}"
    for node in ast.walk(ast.parse(path.read_text())):
        private = isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
        if private and isinstance(node.value, ast.Name) and node.value.id in modules:
            used.append(f"{modules[node.value.id]}.{node.attr}")
    assert [name for name in used if (me, name) not in PRIVATE_ALLOWED] == []
