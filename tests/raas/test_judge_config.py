"""The judge section and the verdict format without a server: config errors that name the key, the checks
before a run (which never contact the endpoint), and every kind of reply read as a score or a clear reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lakeflow.errors import ConfigError, ConfigFileError, VerdictFailure
from lakeflow.raas.check import check_raas_config, check_raas_here
from lakeflow.raas.config import parse_config, reward_function
from lakeflow.raas.scoring.judge import JudgeConfig
from lakeflow.raas.scoring.judge.prompts import groupwise_messages, parse_scores, pointwise_messages, shorten

JUDGE: dict[str, Any] = {"type": "judge", "endpoint": "http://127.0.0.1:9/v1", "model": "judge", "rubric": "Correct?"}


def test_the_string_form_of_reward_still_names_a_function() -> None:
    config = parse_config({"reward": "math"})
    assert config.reward == "math" and reward_function(config) == "math"
    assert parse_config({}).reward is None


def test_a_judge_section_parses_and_is_not_a_function() -> None:
    config = parse_config({"reward": JUDGE | {"mode": "groupwise", "max_concurrency": 3}})
    assert isinstance(config.reward, JudgeConfig)
    judge = config.reward
    assert (judge.mode, judge.max_concurrency, judge.rubric_text()) == ("groupwise", 3, "Correct?")
    with pytest.raises(ConfigError, match="rlvr only"):
        reward_function(config)
    assert check_raas_config(config) == []  # the endpoint is not asked (nothing listens on port 9)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({k: v for k, v in JUDGE.items() if k != "endpoint"}, "reward.judge: Value error, endpoint is missing"),
        ({k: v for k, v in JUDGE.items() if k != "model"}, "model is missing"),
        (JUDGE | {"endpoint": "127.0.0.1:8000/v1"}, "not an http:// or https:// URL"),
        ({k: v for k, v in JUDGE.items() if k != "rubric"}, "exactly one of `rubric`"),
        (JUDGE | {"rubric_file": "r.txt"}, "exactly one of `rubric`"),
        (JUDGE | {"rubric": "  "}, "rubric is empty"),
        (JUDGE | {"mode": "pairwise"}, "reward.judge.mode"),
        (JUDGE | {"temprature": 0.5}, "reward.judge.temprature: Extra inputs are not permitted"),
        (JUDGE | {"backoff_s": 10, "backoff_max_s": 1}, "backoff_max_s 1 is below backoff_s 10"),
        ({"type": "classifier"}, "give a reward function's name, or a section with `type: judge`"),
        ({"endpoint": "http://x/v1"}, "give a reward function's name, or a section with `type: judge`"),
    ],
)
def test_a_bad_judge_section_is_refused_naming_the_key(section: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigFileError, match="reward") as e:
        parse_config({"reward": section}, "pool.yaml")
    assert message in str(e.value) and str(e.value).startswith("pool.yaml: ")


def test_the_check_refuses_other_workflows_and_unreadable_rubric_files(tmp_path: Path) -> None:
    other = parse_config({"workflow": "solve_verify", "reward": JUDGE})
    (problem,) = check_raas_config(other, "models[0].raas.config")
    assert problem.startswith("models[0].raas.config.reward: a judge scores workflow rlvr only, not 'solve_verify'")
    section = {k: v for k, v in JUDGE.items() if k != "rubric"}
    missing = parse_config({"reward": section | {"rubric_file": str(tmp_path / "none.txt")}})
    (problem,) = check_raas_config(missing)
    assert problem.startswith("reward.rubric_file: rubric_file ") and "no such file" in problem
    (tmp_path / "empty.txt").write_text("\n")
    empty = parse_config({"reward": section | {"rubric_file": str(tmp_path / "empty.txt")}})
    assert "is empty" in check_raas_config(empty)[0]
    (tmp_path / "rubric.txt").write_text("Is it right?\n")
    good = parse_config({"reward": section | {"rubric_file": str(tmp_path / "rubric.txt")}})
    assert check_raas_config(good) == [] and good.reward.rubric_text() == "Is it right?"  # type: ignore[union-attr]


def test_the_check_here_asks_for_the_api_key_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    config = parse_config({"reward": JUDGE | {"api_key_env": "LAKEFLOW_TEST_JUDGE_KEY"}})
    monkeypatch.delenv("LAKEFLOW_TEST_JUDGE_KEY", raising=False)
    (problem,) = check_raas_here(config)
    assert problem.startswith("reward.api_key_env: the environment variable 'LAKEFLOW_TEST_JUDGE_KEY' is not set")
    monkeypatch.setenv("LAKEFLOW_TEST_JUDGE_KEY", "secret")
    assert check_raas_here(config) == []


def test_the_prompts_hold_the_rubric_task_reference_and_labelled_answers() -> None:
    system, user = pointwise_messages("Be right.", "What is 3 + 4?", "7", "It is 7.")
    assert "SCORE: <a number from 0 to 1>" in system["content"]
    assert user["content"].split("\n\n") == [
        "# Rubric\nBe right.",
        "# Task\nWhat is 3 + 4?",
        "# Reference answer\n7",
        "# Candidate answer\n<answer>\nIt is 7.\n</answer>",
    ]
    assert "Reference" not in pointwise_messages("r", "t", " ", "a")[1]["content"]
    system, user = groupwise_messages("Be right.", "What is 3 + 4?", "", ["7", "8"])
    assert "SCORE <label>: <a number from 0 to 1>" in system["content"] and "up to SCORE 2" in system["content"]
    assert '<answer label="1">\n7\n</answer>\n\n<answer label="2">\n8\n</answer>' in user["content"]


@pytest.mark.parametrize(
    ("reply", "n", "scores"),
    [
        ("Looks right.\nSCORE: 1", None, [1.0]),
        ("SCORE: 0.25\n", None, [0.25]),
        ("draft SCORE: 0.9\nOn reflection:\n**SCORE:** 0.4.", None, [0.4]),  # the last line counts
        ("score: .5", None, [0.5]),
        ("1 is better.\nSCORE 1: 0.8\nSCORE 2: 0\n- SCORE 3: 1e-1", 3, [0.8, 0.0, 0.1]),
        ("SCORE 02: 0.5\nSCORE 01: 1", 2, [1.0, 0.5]),
        ("SCORE 1: 1\nSCORE 2: 0.5\nSCORE 7: 0.3", 2, [1.0, 0.5]),  # a label beyond the answers is ignored
    ],
)
def test_a_verdict_gives_its_scores(reply: str, n: int | None, scores: list[float]) -> None:
    assert parse_scores(reply, n, 65536) == scores


@pytest.mark.parametrize(
    ("reply", "n", "reason"),
    [
        ("The answer is good.", None, "no-score: the reply has no line 'SCORE: <number in [0, 1]>'"),
        ("SCORE 1: 1", None, "no-score"),
        ("SCORE: NaN", None, "not-a-number: SCORE is 'NaN', not a number in [0, 1]"),
        ("SCORE: -inf", None, "not-a-number: SCORE is '-inf'"),
        ("SCORE: -0.5", None, "out-of-range: SCORE is -0.5, outside [0, 1]"),
        ("SCORE: 7", None, "out-of-range: SCORE is 7, outside [0, 1]"),
        ("SCORE: 1e400", None, "out-of-range: SCORE is 1e400"),
        ("SCORE: excellent", None, "not-a-number: SCORE gives 'excellent'"),
        ("SCORE: 1_0", None, "no-score"),
        ("SCORE: 0.5/1", None, "not-a-number"),
        ("SCORE: ", None, "not-a-number: SCORE gives ''"),
        ("SCORE 1: 1\nSCORE 3: 0", 3, "no-score: the reply has no line 'SCORE <label>: <number>' for answer 2"),
        ("SCORE 1: 1\nSCORE 2: 2", 2, "out-of-range: SCORE 2 is 2"),
        ("x" * 70000 + "\nSCORE: 1", None, "too-long: the reply has 70009 characters, over max_verdict_chars 65536"),
        ("SCORE " + "9" * 5000 + ": 1", 1, "no-score"),  # no crash on a label too long to be one
    ],
)
def test_an_unusable_verdict_is_a_reason_never_a_score(reply: str, n: int | None, reason: str) -> None:
    with pytest.raises(VerdictFailure) as e:
        parse_scores(reply, n, 65536)
    assert str(e.value).startswith(reason)


def test_stored_text_is_cut_to_its_bound_keeping_head_and_tail() -> None:
    text = "head" + "x" * 10_000 + "tail"
    cut = shorten(text, 200)
    assert len(cut) <= 200 and cut.startswith("head") and cut.endswith("tail") and "characters cut" in cut
    assert shorten("short", 200) == "short" and shorten(text, 0) == "" and len(shorten(text, 10)) == 10
