"""`lakeflow tasks check`: every stored task's gold patch makes its tests pass (reward 1) and the mutant left as
it is fails them (reward 0), each scored by the `repo_tests` reward through the path an episode takes
(`episodes/programs.repo_task`: a command in the task's workspace, then its tests there)."""

from __future__ import annotations

import json
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lakeflow.io import Store
from lakeflow.raas.episodes.programs import repo_task
from lakeflow.raas.repo_tests import repo_tests_reward
from lakeflow.raas.workspace import EpisodeSandbox
from lakeflow.tasks.synth import tests_sandbox

GOLD_FILE = ".lakeflow-gold.patch"
# the checker's "agents": one applies the gold patch as an agent's shell would, the other changes nothing
APPLY_GOLD = ["/bin/sh", "-c", f"git apply {GOLD_FILE} && rm {GOLD_FILE}"]
UNCHANGED = ["/bin/true"]


@dataclass(frozen=True)
class Checked:
    """One task's check: the rewards of the gold patch and of the unchanged mutant."""

    prompt_id: str
    gold: float
    mutant: float
    why: str

    @property
    def ok(self) -> bool:
        return self.gold == 1.0 and self.mutant == 0.0


def check_row(sandbox: EpisodeSandbox, row: dict[str, Any]) -> Checked:
    timeout = (sandbox.config.tests_seconds + 30) / 0.95
    answer = row["answer"]
    gold_files = {GOLD_FILE: row["gold_patch"].encode()}
    fixed = repo_task(sandbox, APPLY_GOLD, {}, answer, timeout, files=gold_files)
    left = repo_task(sandbox, UNCHANGED, {}, answer, timeout)
    gold = repo_tests_reward(json.dumps(fixed.tests), answer)
    mutant = repo_tests_reward(json.dumps(left.tests), answer)
    why = "" if gold.value == 1.0 else f"gold: {gold.reason} {gold.extracted} {fixed.error[:120]}"
    why += "" if mutant.value == 0.0 else f" mutant: {mutant.reason} {mutant.extracted}"
    return Checked(row["prompt_id"], gold.value, mutant.value, why.strip())


def check_rows(store: Store, rows: list[dict[str, Any]], seconds: float, workers: int) -> list[Checked]:
    with tempfile.TemporaryDirectory(prefix="lakeflow-tasks-check-") as tmp:
        sandbox = tests_sandbox(4096, seconds, Path(tmp) / "sandbox")
        sandbox.bases.store = store  # the tasks' workspaces are states in this lake (read; no change is stored)
        try:
            with ThreadPoolExecutor(workers) as pool:
                return list(pool.map(lambda r: check_row(sandbox, r), rows))
        finally:
            sandbox.close()
