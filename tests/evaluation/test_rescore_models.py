"""`lakeflow rescore --reward-config`: stored samples scored again by a judge (a real `lakeflow serve` endpoint of
the tiny model, through the pools' own client and scorer) or by a reward model (the tiny classifier), and a
judge that gives no verdict never turning into a reward of 0."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lakeflow.cli import main
from lakeflow.errors import ConfigFileError
from lakeflow.evaluation.rescore import rescore
from lakeflow.evaluation.rescore_config import read_reward_config
from lakeflow.lake.metrics import read_metrics
from lakeflow.raas.config import ServeConfig
from lakeflow.raas.config.judge import JudgeConfig
from lakeflow.raas.config.reward_model import RewardModelConfig
from lakeflow.raas.scoring.judge.client import Judge
from lakeflow.raas.scoring.judge.prompts import pointwise_messages
from tests.evaluation.test_rescore import RESPONSES, _lake

pytest.importorskip("torch")

RUBRIC = "The answer must equal the reference."
CHOICE = {"verdict": "choice", "choices": {"0": 0.0, "1": 0.5, "2": 1.0}, "constrained": True}


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    from lakeflow.models import resolve_model

    return resolve_model("tiny:raas-test", tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def served(tiny_dir: str) -> Iterator[Any]:
    """What `lakeflow serve` runs: the tiny model behind lakeflow's OpenAI-compatible endpoint on 127.0.0.1."""
    from lakeflow.raas.serving.model_server import ModelServer

    server = ModelServer(ServeConfig(id="judge", model=tiny_dir))
    yield server
    server.close()


def _judge(url: str, **more: Any) -> JudgeConfig:
    return JudgeConfig.model_validate({"endpoint": url, "model": "judge", "rubric": RUBRIC, **CHOICE, **more})


def test_a_served_judge_rescores_the_stored_samples_as_a_pool_would(tmp_path: Path, served: Any) -> None:
    store = _lake(tmp_path, {"a": "7", "b": "12"})
    config = _judge(served.url, max_concurrency=4)
    done = rescore(store, config)
    rows = read_metrics(store, "rescores")[0].to_pylist()
    assert done.samples == 5 and done.failed == 0 and done.name == "judge:judge", rows[0]["reason"]
    assert len(rows) == 5 and {r["reason"] for r in rows} == {"judged"}
    assert json.loads(rows[0]["reward_spec"])["type"] == "judge"
    # each reward is the verdict the judge's own client gets for the pool's prompt of that sample
    judge = Judge(config)
    try:
        for r in rows:
            answer = {"a": "7", "b": "12"}[r["prompt_id"]]
            text = RESPONSES[r["stored_reward"]]
            verdict = judge.ask(pointwise_messages(RUBRIC, "q", answer, text, config.choices), None)
            assert verdict.scores is not None and r["reward"] == pytest.approx(verdict.scores[0], abs=1e-6)
    finally:
        judge.close()


def test_a_judge_that_gives_no_verdict_leaves_null_rewards_with_the_reason(tmp_path: Path) -> None:
    store = _lake(tmp_path, {"a": "7", "b": "12"})
    with socket.socket() as s:  # a port nobody listens on: every request is refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = _judge(f"http://127.0.0.1:{port}/v1", retries=0, backoff_s=0.01, backoff_max_s=0.01, hold_s=0.05)
    done = rescore(store, config, name="down")
    assert done.samples == 5 and done.failed == 5
    rows = read_metrics(store, "rescores")[0].to_pylist()
    assert [r["reward"] for r in rows] == [None] * 5  # never a 0
    assert all(
        r["reason"].startswith("failed: the judge gave no verdict") and "unreachable" in r["reason"] for r in rows
    )


def test_a_reward_model_rescores_through_the_command(tmp_path: Path, tiny_dir: str) -> None:
    from lakeflow.raas.scoring.reward_model.scorer import text_form
    from tests.raas.reward_model_helpers import build_reward_model, direct_scores

    store = _lake(tmp_path, {"a": "7", "b": "12"})
    model = build_reward_model(tmp_path / "rm", tiny_dir)
    path = tmp_path / "rm.yaml"
    path.write_text(f"reward: {{type: reward_model, model: {model}, input: text, batch_size: 2, scale: 2.0}}\n")
    out = CliRunner().invoke(
        main, ["rescore", "--lake", str(tmp_path / "lake"), "--reward-config", str(path), "--name", "rm"]
    )
    assert out.exit_code == 0, out.output
    assert "re-scored 5 samples as 'rm'" in out.output
    rows = read_metrics(store, "rescores")[0].to_pylist()
    texts = [text_form([{"role": "user", "content": "q"}], RESPONSES[r["stored_reward"]]) for r in rows]
    expected = [2.0 * s for s in direct_scores(model, texts)]
    assert [r["reward"] for r in rows] == pytest.approx(expected, abs=1e-4)
    assert {r["reason"] for r in rows} == {"reward_model"}


def test_the_reward_file_is_checked_by_the_pools_config_classes(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("reward: {type: judge, endpoint: http://127.0.0.1:1/v1, model: m, rubric: r, verdit: choice}\n")
    with pytest.raises(ConfigFileError, match="verdit"):
        read_reward_config(str(bad))
    function = tmp_path / "function.yaml"
    function.write_text("reward: math\n")
    with pytest.raises(ConfigFileError, match="--reward math"):
        read_reward_config(str(function))
    (tmp_path / "rubric.txt").write_text("Be right.")
    good = tmp_path / "good.yaml"
    good.write_text("reward: {type: judge, endpoint: http://127.0.0.1:1/v1, model: m, rubric_file: rubric.txt}\n")
    judge = read_reward_config(str(good))
    assert isinstance(judge, JudgeConfig) and judge.rubric_text() == "Be right."
    assert isinstance(read_reward_config_model(tmp_path), RewardModelConfig)
    both = CliRunner().invoke(
        main, ["rescore", "--lake", str(tmp_path), "--reward", "math", "--reward-config", str(good)]
    )
    assert both.exit_code == 2 and "one of --reward" in both.output


def read_reward_config_model(tmp_path: Path) -> Any:
    path = tmp_path / "rm.json"
    path.write_text(json.dumps({"reward": {"type": "reward_model", "model": str(tmp_path)}}))
    return read_reward_config(str(path))
