"""`check_run_config`: the problems of every process of a run, each under its key in the run config; every
job in jobs/ passes it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lakeflow.run import load_run_config
from lakeflow.run.check import check_run_config
from lakeflow.run.config import RunConfig
from lakeflow.run.observe import eval_specs

JOBS = [p for p in sorted((Path(__file__).resolve().parents[2] / "jobs").rglob("*.yaml")) if "steps:" in p.read_text()]


def run(raas: dict[str, Any] | None = None, **model: Any) -> RunConfig:
    m = {
        "id": "policy",
        "dataflow": {"vocab_size": 512, "dataset": {"type": "synthetic"}},
        "trainer": {"model": "tiny:x"},
        "raas": {"config": raas or {}},
        **model,
    }
    return RunConfig.model_validate({"name": "c", "steps": 1, "models": [m]})


@pytest.mark.parametrize("path", JOBS, ids=lambda p: p.name)
def test_every_job_passes_the_check(path: Path) -> None:
    assert check_run_config(load_run_config(path)) == []


def test_a_region_that_overrides_the_workflow_is_checked_under_its_own_key() -> None:
    regions = [{"region": "eu", "config": {"workflow": "rvlr"}}, {"region": "us", "config": {"max_new_tokens": 8}}]
    (problem,) = check_run_config(run(regions=regions))
    assert problem.startswith("models[0].regions[0].config.workflow: unknown workflow 'rvlr'")


def test_the_eval_scores_with_the_pools_reward_and_is_checked_with_it(tmp_path: Path) -> None:
    rows = tmp_path / "poems.jsonl"
    rows.write_text(json.dumps({"prompt": "a poem", "answer": "", "task_type": "poetry"}) + "\n")
    dataset = {"type": "file", "path": str(rows)}
    config = run(eval={"dataset": dataset})
    assert check_run_config(config) == [
        "models[0].eval.dataset: no reward for task_type 'poetry' (known: code, math, reasoning_gym): set `reward` "
        "in the rollout config (a shipped name, 'package.module:attr' or a name registered in 'lakeflow.rewards'), "
        "or give the dataset's rows a task_type that has one"
    ]
    config = run({"reward": "math"}, eval={"dataset": dataset})
    assert check_run_config(config) == []
    assert eval_specs(config)[0].config["reward"] == "math"  # the eval process gets the pool's reward


def test_a_dataset_file_that_cannot_be_read_is_a_problem_at_start(tmp_path: Path) -> None:
    broken = tmp_path / "broken.jsonl"
    broken.write_text("{not json\n")
    (problem,) = check_run_config(run(dataflow={"vocab_size": 512, "dataset": {"type": "file", "path": str(broken)}}))
    assert problem.startswith(f"models[0].dataflow.dataset: cannot read dataset {broken}")
