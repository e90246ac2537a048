"""`lakeflow bench startup`: how long the CLI takes to answer, beside `python -c "import duckdb"`.

Every command runs as a new process (as a user or a restarted service would start it), several
times in turns; the table gives each one's median wall time and its ratio to importing DuckDB.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from lakeflow.io import open_store
from lakeflow.lake.synth import SynthSpec, write_synthetic
from lakeflow.text import text_table


def _lakeflow() -> list[str]:
    found = shutil.which("lakeflow")
    return [found] if found else [sys.executable, "-m", "lakeflow"]


def commands(lake: str) -> dict[str, list[str]]:
    """name -> argv of every command measured (import torch only where torch is installed)."""
    cli = _lakeflow()
    out = {
        'python -c "import duckdb"': [sys.executable, "-c", "import duckdb"],
        "lakeflow --version": [*cli, "--version"],
        "lakeflow --help": [*cli, "--help"],
        "lakeflow sql (count)": [*cli, "sql", "--lake", lake, "SELECT count(*) FROM trajectories"],
        "lakeflow status": [*cli, "status", "--lake", lake],
    }
    if importlib.util.find_spec("torch") is not None:
        out['python -c "import torch"'] = [sys.executable, "-c", "import torch"]
    return out


def run(repeats: int = 5) -> dict[str, Any]:
    """Median wall seconds of each command over `repeats` rounds (commands interleaved per round)."""
    with tempfile.TemporaryDirectory(prefix="lakeflow-bench-startup-") as tmp:
        lake = os.path.join(tmp, "lake")
        write_synthetic(open_store(lake), SynthSpec(samples=2048, group_size=8, prompt_tokens=32, response_tokens=32))
        argvs = commands(lake)
        times: dict[str, list[float]] = {name: [] for name in argvs}
        for _ in range(repeats):
            for name, argv in argvs.items():
                start = time.perf_counter()
                subprocess.run(argv, check=True, capture_output=True, cwd=tmp, timeout=300)
                times[name].append(time.perf_counter() - start)
    base = statistics.median(times['python -c "import duckdb"'])
    rows = [
        {
            "command": name,
            "median_s": round(statistics.median(t), 3),
            "vs_import_duckdb_x": round(statistics.median(t) / base, 2),
        }
        for name, t in times.items()
    ]
    return {"repeats": repeats, "results": rows}


def render(report: dict[str, Any]) -> str:
    cols = ["command", "median_s", "vs_import_duckdb_x"]
    lines = [f"CLI start-up, median of {report['repeats']} runs each (new process per run)"]
    return "\n".join(lines + text_table(cols, [[str(r[c]) for c in cols] for r in report["results"]]))
