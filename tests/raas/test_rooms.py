"""The rollout service's rooms (docs/architecture.md, "The rollout service"): who inside `lakeflow/raas` may
import whom. The rooms are folders; the modules at the top of `raas/` (trajectory, groups, rewards, the
multi-role workflows, the sandbox) are the floor every room stands on, except two that sit higher: the
workflow registry (`workflows.py`, which registers the agent workflow of `episodes/`) and the checks
before a start (`check.py`)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

RAAS = Path(__file__).resolve().parents[2] / "lakeflow" / "raas"
FLOOR = "floor"  # the modules at the top of raas/ but for the two below
HIGHER = {"workflows", "check"}  # top-level modules that are rooms of their own
# room -> the rooms it may import (besides itself)
ALLOWED = {
    "config": set(),
    "engines": {"config"},
    FLOOR: {"config", "engines"},
    "gateway": set(),  # the HTTP adapter: wire formats and the server, nothing of the service
    "agent": {"config", "engines", FLOOR},
    # sandboxed workspaces of command episodes: the config, the floor's sandbox pieces (uids, kills, limits)
    "workspace": {"config", FLOOR},
    "episodes": {"config", "engines", "agent", "gateway", "workspace", FLOOR},
    "workflows": {"config", "engines", "episodes", FLOOR},
    "scoring": {"config", "engines", "workflows", FLOOR},
    "serving": {"config", "engines", "gateway"},  # a frozen model behind the gateway's server (`lakeflow serve`)
    "check": {"config", "engines", "agent", "scoring", "workflows", FLOOR},
    "service": {"config", "engines", "episodes", "scoring", "workflows", "workspace", FLOOR},
}


def _room(path: Path) -> str:
    parts = path.relative_to(RAAS).parts
    return parts[0] if len(parts) > 1 else (path.stem if path.stem in HIGHER else FLOOR)


def _imported_rooms(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + (
                [f"{node.module}.{a.name}" for a in node.names] if node.module == "lakeflow.raas" else []
            )
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[:2] == ["lakeflow", "raas"] and len(parts) > 2:
                out.add(parts[2] if (RAAS / parts[2]).is_dir() or parts[2] in HIGHER else FLOOR)
    return out


def test_each_room_imports_only_the_rooms_below_it() -> None:
    wrong = []
    for path in sorted(RAAS.rglob("*.py")):
        if path == RAAS / "__init__.py":
            continue  # the package's public names
        room = _room(path)
        assert room in ALLOWED, f"{path}: folder {room!r} is not a room of docs/architecture.md"
        wrong += [f"{path.relative_to(RAAS)} imports {r}" for r in _imported_rooms(path) - ALLOWED[room] - {room}]
    assert wrong == []


def test_the_rooms_form_no_cycle() -> None:
    edges: dict[str, set[str]] = defaultdict(set)
    for path in RAAS.rglob("*.py"):
        if path != RAAS / "__init__.py":
            edges[_room(path)] |= _imported_rooms(path) - {_room(path)}
    cycles = [(a, b) for a in edges for b in edges[a] if a in edges.get(b, set())]
    assert cycles == [], f"rooms importing each other: {cycles}"
