"""What `lakeflow bench …` measures of a user's own setup: the weight codec on their weights (`weights.py`),
the lake's formats in their bucket (`lake.py`, `sqlscan.py`), the CLI's start-up on their install
(`startup.py`). The research benchmarks are the checkout's `benchmarks/` (docs/benchmarks.md)."""

from __future__ import annotations

import os
import platform


def machine() -> str:
    """The machine a benchmark ran on, in one line (architecture, CPUs, Python)."""
    return f"{platform.machine()}, {os.cpu_count()} cpus, python {platform.python_version()}"
