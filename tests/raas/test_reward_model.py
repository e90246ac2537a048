"""Reward models on a tiny sequence classifier built here (tests/raas/reward_model_helpers.py), with real
torch and transformers: the scorer's scores against a direct forward, batching, truncation and labels; the
runner's rewards and extra; a model that fails drops the group; the config, its union and the checks."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from lakeflow.errors import ConfigError, ConfigFileError
from lakeflow.raas.check import check_raas_config, check_raas_here
from lakeflow.raas.config import parse_config, reward_function
from lakeflow.raas.scoring.reward_model import RewardModelConfig
from lakeflow.raas.scoring.reward_model.model_scorer import RewardModelScorer
from lakeflow.raas.scoring.reward_model.scorer import RewardModel, text_form
from lakeflow.raas.scoring.runner import ScoredRunner
from lakeflow.raas.trajectory import Sampling
from tests.raas.multi_helpers import Scripted, make_task
from tests.raas.reward_model_helpers import build_reward_model, direct_scores

PAIRS = [
    ([{"role": "user", "content": "What is 3 + 4?"}], "7"),
    ([{"role": "system", "content": "Answer with the number only."}, {"role": "user", "content": "2 + 2?"}], "4"),
    ([{"role": "user", "content": "What is 12 + 30 * 2? Answer with the number only."}], "The answer is 72."),
]


def scorer(model_dir: str, **kw: Any) -> RewardModel:
    return RewardModel(RewardModelConfig.model_validate({"model": model_dir, "device": "cpu", **kw}))


def chat_text(model_dir: str, messages: list[dict[str, str]], completion: str) -> str:
    from transformers import AutoTokenizer

    turns = [*messages, {"role": "assistant", "content": completion}]
    return str(AutoTokenizer.from_pretrained(model_dir).apply_chat_template(turns, tokenize=False))


def test_scores_equal_a_direct_forward_whatever_the_batch_size(reward_model_dir: str) -> None:
    expected = direct_scores(reward_model_dir, [chat_text(reward_model_dir, m, c) for m, c in PAIRS])
    assert len(set(expected)) == 3  # three different inputs, of different lengths: batches of 3 are padded
    for batch_size in (1, 3):
        model = scorer(reward_model_dir, batch_size=batch_size)
        got = model.score(PAIRS)
        assert [s.logit for s in got] == pytest.approx(expected, abs=1e-5)
        assert not any(s.truncated for s in got)
        model.close()


def test_text_input_is_the_prompt_a_newline_and_the_completion(reward_model_dir: str) -> None:
    assert text_form(*PAIRS[0]) == "What is 3 + 4?\n7"
    assert text_form(*PAIRS[1]) == "[system]\nAnswer with the number only.\n\n[user]\n2 + 2?\n4"
    expected = direct_scores(reward_model_dir, [text_form(m, c) for m, c in PAIRS])
    got = scorer(reward_model_dir, input="text", batch_size=2).score(PAIRS)
    assert [s.logit for s in got] == pytest.approx(expected, abs=1e-5)


def test_a_long_input_keeps_its_last_max_length_tokens(reward_model_dir: str) -> None:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    messages = [{"role": "user", "content": "What is 1 + 1? " * 20}]
    tokenizer = AutoTokenizer.from_pretrained(reward_model_dir)
    ids = tokenizer(chat_text(reward_model_dir, messages, "2"))["input_ids"]
    limit = len(tokenizer(chat_text(reward_model_dir, *PAIRS[0]))["input_ids"])  # the short pair just fits
    assert len(ids) > limit
    model = AutoModelForSequenceClassification.from_pretrained(reward_model_dir).eval()
    with torch.inference_mode():
        expected = float(model(input_ids=torch.tensor([ids[-limit:]])).logits[0, 0])
    (long, short) = scorer(reward_model_dir, max_length=limit, batch_size=2).score([(messages, "2"), PAIRS[0]])
    assert long.truncated and long.logit == pytest.approx(expected, abs=1e-5)
    assert not short.truncated


def test_a_model_of_several_outputs_needs_its_label(reward_model_dir: str, tiny_dir: str, tmp_path: Path) -> None:
    three = build_reward_model(tmp_path / "three", tiny_dir, num_labels=3)
    with pytest.raises(ConfigError, match=r"has 3 outputs \(num_labels 3\): set `label` to the index"):
        scorer(three)
    (problem,) = check_raas_config(parse_config({"reward": {"type": "reward_model", "model": three}}))
    assert problem == (
        f"reward.label: {three}: the model has 3 outputs (num_labels 3): set `label` to the index of the logit "
        "that is the reward (0 to 2)"
    )
    past = parse_config({"reward": {"type": "reward_model", "model": three, "label": 3}})
    assert "label 3 is past the model's 3 outputs" in check_raas_config(past)[0]
    text = chat_text(three, *PAIRS[0])
    (got,) = scorer(three, label=2).score(PAIRS[:1])
    assert got.logit == pytest.approx(direct_scores(three, [text], label=2)[0], abs=1e-5)
    assert check_raas_config(parse_config({"reward": {"type": "reward_model", "model": three, "label": 2}})) == []


def test_a_causal_lm_is_not_a_reward_model(tiny_dir: str) -> None:
    config = parse_config({"reward": {"type": "reward_model", "model": tiny_dir}})
    (problem,) = check_raas_config(config, "models[0].raas.config")
    assert problem.startswith(f"models[0].raas.config.reward.model: {tiny_dir}: not a sequence-classification model")
    assert "['Qwen2ForCausalLM']" in problem and "score head would be random" in problem
    with pytest.raises(ConfigError, match="not a sequence-classification model"):
        scorer(tiny_dir)


def test_the_check_here_wants_the_model_directory_and_the_device(tmp_path: Path, reward_model_dir: str) -> None:
    missing = str(tmp_path / "no-such-model")
    config = parse_config({"reward": {"type": "reward_model", "model": missing, "device": "cuda:7"}})
    assert check_raas_config(config) == []  # nothing to read here: the check here says so
    problems = check_raas_here(config)
    assert problems[0] == f"reward.model: no model directory at {missing}: convert a model there " + (
        f"(`lakeflow models convert SOURCE --out {missing}`)"
    )
    assert problems[1].startswith("reward.device: 'cuda:7'")
    assert check_raas_here(parse_config({"reward": {"type": "reward_model", "model": reward_model_dir}})) == []


def test_the_union_parses_a_reward_model_section_and_names_both_types() -> None:
    config = parse_config({"reward": {"type": "reward_model", "model": "org/rm", "scale": 0.5, "label": 1}})
    assert isinstance(config.reward, RewardModelConfig)
    assert (config.reward.model, config.reward.scale, config.reward.label, config.reward.device) == (
        "org/rm",
        0.5,
        1,
        "auto",
    )
    with pytest.raises(ConfigError, match="a reward model scores workflow rlvr only"):
        reward_function(config)
    for section, message in [
        ({"type": "reward-model", "model": "x"}, "or `type: reward_model` (a sequence classifier run in the service)"),
        ({"type": "reward_model"}, "reward.reward_model: Value error, model is missing: give the reward model's"),
        ({"type": "reward_model", "model": "x", "input": "html"}, "reward.reward_model.input"),
        ({"type": "reward_model", "model": "x", "batchsize": 4}, "batchsize: Extra inputs are not permitted"),
    ]:
        with pytest.raises(ConfigFileError, match="reward") as e:
            parse_config({"reward": section}, "pool.yaml")
        assert message in str(e.value)
    other = parse_config({"workflow": "solve_verify", "reward": {"type": "reward_model", "model": "org/rm"}})
    (problem,) = check_raas_config(other)
    assert problem.startswith("reward: a reward model scores workflow rlvr only, not 'solve_verify'")


def test_the_runner_stamps_rewards_and_extra(reward_model_dir: str, tok: Any) -> None:
    model = scorer(reward_model_dir, scale=2.0, shift=-1.0)
    engine = Scripted(tok, ["7", "8", " ", "seven", "4", "four"])
    runner = ScoredRunner(engine, RewardModelScorer(model, Sampling(64, 1.0), 8192), Sampling(64, 1.0), batch_groups=2)
    runner.add("a", make_task(3))
    assert runner.can_admit(3)
    runner.add("b", make_task(3, prompt="What is 2 + 2?", answer="4"))
    assert not runner.can_admit(3)
    a, b = runner.advance(0.0)
    assert (a.key, b.key) == ("a", "b") and not a.dropped and not b.dropped and len(engine.calls) == 1
    messages = [[{"role": "user", "content": "What is 3 + 4?"}], [{"role": "user", "content": "What is 2 + 2?"}]]
    texts = [chat_text(reward_model_dir, messages[0], c) for c in ("7", "8")]
    texts += [chat_text(reward_model_dir, messages[1], c) for c in ("seven", "4", "four")]
    expected = iter(direct_scores(reward_model_dir, texts))
    empty = a.trajectories[2]
    assert (empty.reward, empty.extra["reward_reason"]) == (0.0, "empty") and "reward_model" not in empty.extra
    for t in [*a.trajectories[:2], *b.trajectories]:
        logit = next(expected)
        assert t.extra["reward_reason"] == "reward_model"
        assert t.extra["reward_model"] == {"model": reward_model_dir, "score": pytest.approx(logit, abs=1e-5)}
        assert t.reward == pytest.approx(2.0 * logit - 1.0, abs=1e-5)
    assert runner.advance(0.0) == []
    runner.close()


def test_a_model_that_fails_drops_its_groups_and_says_why(
    tiny_dir: str, tmp_path: Path, tok: Any, caplog: pytest.LogCaptureFixture
) -> None:
    broken = build_reward_model(tmp_path / "small-vocab", tiny_dir, vocab_size=8)  # most token ids are past it
    sampling = Sampling(64, 1.0)
    runner = ScoredRunner(
        Scripted(tok, ["7", "8", "9"]), RewardModelScorer(scorer(broken), sampling, 8192), sampling, 2
    )
    runner.add("a", make_task(1))
    runner.add("b", make_task(1))
    with caplog.at_level(logging.WARNING):
        groups = runner.advance(0.0)
    assert [(g.key, g.trajectories) for g in groups] == [("a", []), ("b", [])]
    assert all(g.dropped.startswith("the reward model failed: IndexError") for g in groups)
    assert "scoring each alone" in caplog.text
    assert caplog.text.count("dropping group") == 2 and "its task is reissued" in caplog.text
    assert "IndexError" in caplog.records[-1].exc_text  # the traceback is logged
    runner.add("c", make_task(1))  # alone: dropped at once
    (group,) = runner.advance(0.0)
    assert group.key == "c" and group.dropped and not group.trajectories
    runner.close()
