"""A rollout service on the tiny model (hf engine) whose rewards come from a reward model: a tiny sequence
classifier built here, loaded once by the service on the CPU. Its samples are committed with the model's
scores, ingested and served; the run's checks refuse an eval that would inherit it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lakeflow.io import Store
from lakeflow.lake import tasks as lake_tasks
from lakeflow.lake.batch import list_batch_steps
from lakeflow.raas.engines import decode_text
from lakeflow.raas.scoring.reward_model.model_scorer import RewardModelScorer
from lakeflow.raas.scoring.runner import ScoredRunner
from lakeflow.raas.service import RolloutService
from lakeflow.raas.trajectory import task_messages
from lakeflow.run.check import check_run_config, check_run_here
from lakeflow.weights import State
from tests.raas.reward_model_helpers import direct_scores
from tests.raas.test_reward_model import chat_text
from tests.raas.test_service import N, committed, dataflow, raas_config
from tests.run.test_check import run


def test_samples_scored_by_a_reward_model_are_committed_and_served(
    lake: tuple[Store, State], tmp_path: Any, reward_model_dir: str, tok: Any
) -> None:
    store, _ = lake
    flow = dataflow(store)
    flow.run(iterations=1)
    section = {"type": "reward_model", "model": reward_model_dir, "device": "cpu", "shift": 1.0, "batch_size": 3}
    service = RolloutService(store, "policy", raas_config(tmp_path, reward=section, commit_window_s=0))
    assert isinstance(service.runner, ScoredRunner) and isinstance(service.runner.scorer, RewardModelScorer)
    stats = service.run(max_groups=2)
    assert (stats.groups, stats.samples, stats.unscored) == (2, 2 * N, 0)
    rows = committed(store).to_pylist()
    assert len(rows) == 2 * N
    scored = [(row, json.loads(row["extra"])) for row in rows]
    scored = [(row, extra) for row, extra in scored if extra["reward_reason"] != "empty"]  # 0, never scored
    assert scored
    for row, extra in scored:
        assert extra["reward_reason"] == "reward_model" and extra["reward_model"]["model"] == reward_model_dir
        assert row["reward"] == pytest.approx(extra["reward_model"]["score"] + 1.0)
    for row, extra in scored[:2]:  # the stored score is the model's on the task and the sample's completion
        messages = task_messages(lake_tasks.read_task(store, "policy", row["task_id"]))
        text = chat_text(reward_model_dir, messages, decode_text(tok, row["response_ids"]))
        assert direct_scores(reward_model_dir, [text])[0] == pytest.approx(extra["reward_model"]["score"], abs=1e-5)
    flow.run(iterations=1)
    assert flow.counters.samples == 2 * N and not flow.counters.quarantined
    assert len(list_batch_steps(store, "policy")) == 1
    flow.close()
    service.close()


def test_a_run_checks_the_reward_model_and_keeps_it_from_the_eval(tmp_path: Any, reward_model_dir: str) -> None:
    section = {"type": "reward_model", "model": reward_model_dir}
    config = run({"reward": section}, eval={"dataset": {"type": "synthetic"}}, trainer={"model": "tiny:x"})
    assert check_run_config(config) == [
        "models[0].eval.reward: the pool scores with a reward model, which `lakeflow eval` does not call: name "
        "the eval's own reward function (e.g. math) or remove the eval section"
    ]
    assert [p for p in check_run_here(config) if ".reward" in p] == []
    gone = run({"reward": section | {"model": str(tmp_path / "gone")}}, trainer={"model": "tiny:x"})
    assert [p for p in check_run_here(gone) if ".reward" in p] == [
        f"models[0].raas.config.reward.model: no model directory at {tmp_path / 'gone'}: convert a model there "
        f"(`lakeflow models convert SOURCE --out {tmp_path / 'gone'}`)"
    ]
