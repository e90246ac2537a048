"""A run whose pool scores with a judge: the checks before `lakeflow run` (which never contact the endpoint),
the eval that cannot inherit a judge, rubric files found beside the config, the API key's variable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lakeflow.run import load_run_config
from lakeflow.run.check import check_run_config, check_run_here
from lakeflow.run.observe import eval_specs
from tests.run.test_check import run

JUDGE: dict[str, Any] = {"type": "judge", "endpoint": "http://127.0.0.1:9/v1", "model": "judge", "rubric": "Right?"}


def test_a_judge_scores_every_task_type_of_the_dataset(tmp_path: Path) -> None:
    rows = tmp_path / "poems.jsonl"
    rows.write_text(json.dumps({"prompt": "a poem", "answer": "", "task_type": "poetry"}) + "\n")
    dataflow = {"vocab_size": 512, "dataset": {"type": "file", "path": str(rows)}}
    assert check_run_config(run({"reward": JUDGE}, dataflow=dataflow)) == []  # nothing listens on port 9: not asked


def test_the_eval_does_not_inherit_a_judge() -> None:
    config = run({"reward": JUDGE}, eval={"dataset": {"type": "synthetic"}})
    assert check_run_config(config) == [
        "models[0].eval.reward: the pool scores with a judge, which `lakeflow eval` does not call: name the eval's "
        "own reward function (e.g. math) or remove the eval section"
    ]
    assert eval_specs(config)[0].config["reward"] is None
    named = run({"reward": JUDGE}, eval={"dataset": {"type": "synthetic"}, "reward": "math"})
    assert check_run_config(named) == [] and eval_specs(named)[0].config["reward"] == "math"


def test_a_judge_on_another_workflow_or_region_is_checked_under_its_key() -> None:
    (problem,) = check_run_config(run({"reward": JUDGE, "workflow": "solve_verify", "roles": {"policy": "policy"}}))
    assert problem.startswith("models[0].raas.config.reward: a judge scores workflow rlvr only")
    section = {k: v for k, v in JUDGE.items() if k != "rubric"} | {"rubric_file": "/nonexistent/rubric.txt"}
    (problem,) = check_run_config(run(regions=[{"region": "eu", "config": {"reward": section}}]))
    assert problem.startswith("models[0].regions[0].config.reward.rubric_file: rubric_file '/nonexistent/rubric.txt'")


def test_a_rubric_file_is_found_beside_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "rubric.txt").write_text("Is the proof complete?\n")
    section = {k: v for k, v in JUDGE.items() if k != "rubric"} | {"rubric_file": "rubric.txt"}
    model = {
        "id": "policy",
        "dataflow": {"vocab_size": 512, "dataset": {"type": "synthetic"}},
        "trainer": {"model": "tiny:x"},
        "raas": {"config": {"reward": section}},
        "regions": [{"region": "eu", "config": {"reward": section}}],
    }
    (job / "run.yaml").write_text(json.dumps({"name": "c", "steps": 1, "models": [model]}))
    monkeypatch.chdir(tmp_path)
    config = load_run_config(job / "run.yaml")
    rubric = str(job / "rubric.txt")
    reward = config.models[0].raas.config.reward
    assert reward is not None and not isinstance(reward, str) and reward.rubric_file == rubric
    assert config.models[0].regions[0].config["reward"]["rubric_file"] == rubric
    assert check_run_config(config) == [] and reward.rubric_text() == "Is the proof complete?"


def test_lakeflow_run_looks_for_the_api_key_variable_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAKEFLOW_TEST_JUDGE_KEY", raising=False)
    config = run({"reward": JUDGE | {"api_key_env": "LAKEFLOW_TEST_JUDGE_KEY"}}, trainer={"model": "tiny:x"})
    assert [p for p in check_run_here(config) if ".reward." in p] == [
        "models[0].raas.config.reward.api_key_env: the environment variable 'LAKEFLOW_TEST_JUDGE_KEY' is not set "
        "here: export it with the judge endpoint's API key, or drop api_key_env for an endpoint without keys"
    ]
    monkeypatch.setenv("LAKEFLOW_TEST_JUDGE_KEY", "secret")
    assert [p for p in check_run_here(config) if ".reward." in p] == []
