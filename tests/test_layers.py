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
    "weights": {"text", "lake", "io", "errors"},
    "infra": {"lake", "errors"},
    "tracking": {"configfile", "text", "lake", "io", "errors"},
    "dataflow": {"configfile", "text", "humaneval", "catalog", "weights", "lake", "io", "errors"},
    "models": {"configfile", "text", "errors"},
    "raas": {"configfile", "text", "humaneval", "models", "weights", "lake", "io", "errors", "tracking"},
    "trainer": {"configfile", "text", "models", "weights", "lake", "io", "errors", "tracking"},
    "evaluation": {"configfile", "text", "raas", "dataflow", "tracking", "weights", "lake", "io", "errors"},
    "report": {"configfile", "text", "catalog", "weights", "lake", "io", "errors"},
    "notebook": {"text", "catalog", "dataflow", "lake", "io", "errors"},
    "run": {
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
    "bench": {"text", "catalog", "weights", "lake", "io", "errors"},  # measures of the user's own setup
    "cli": {
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
