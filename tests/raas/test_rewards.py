"""Math and reasoning-gym rewards: right and wrong answers, and every kind of bad output scoring 0 with a reason."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import threading
from collections.abc import Iterator

import pytest

from lakeflow.dataflow.config import ReasoningGymDataset
from lakeflow.dataflow.datasets import load_prompts
from lakeflow.errors import PluginError
from lakeflow.raas import rewards
from lakeflow.raas.rewards import Reward, build_reward, last_number_reward, math_reward, reasoning_gym_reward

needs_reasoning_gym = pytest.mark.skipif(
    importlib.util.find_spec("reasoning_gym") is None, reason="reasoning-gym is not installed"
)


@pytest.mark.parametrize("text", ["42", "The answer is 42.", r"so \boxed{42}", "42.0", "x = 7 * 6 = 42"])
def test_a_correct_answer_scores_1(text: str) -> None:
    r = math_reward(text, "42")
    assert (r.value, r.reason) == (1.0, "correct")


@pytest.mark.parametrize("text", ["41", "The answer is 43.", "42, no wait, 24"])
def test_a_wrong_answer_scores_0(text: str) -> None:
    r = math_reward(text, "42")
    assert (r.value, r.reason) == (0.0, "wrong") and r.extracted


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("5362 + 6116", "11478"),  # what SmolLM2 learnt to reply to "What is 5362 + 6116?" under GRPO
        ("To add 76 + 97, you simply add them together: 76 + 97 =", "173"),  # cut before its answer
        ("12 + 34 * 56", "1916"),
        (r"\boxed{407+66}", "473"),
        (r"$407 \times 2$", "814"),
        (r"\boxed{2^{10}}", "1024"),
    ],
)
def test_a_restated_expression_is_not_an_answer(text: str, answer: str) -> None:
    """math-verify evaluates "76 + 97" and calls it right: the reward refuses what is not a value."""
    r = math_reward(text, answer)
    assert (r.value, r.reason) == (0.0, "unevaluated") and r.extracted
    if "boxed" not in text:  # worked through to the value: right (a boxed answer is the boxed one)
        assert math_reward(f"{text} = {answer}", answer).value == 1.0


def test_an_expression_is_an_answer_where_the_reference_is_one() -> None:
    assert math_reward("1 + x", "x + 1").value == 1.0
    assert math_reward(r"\frac{1}{2}", "0.5").value == 1.0  # a fraction is a value


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("   \n", "empty"),
        ("garbage ### ??", "no-answer"),
        ("\x00\xff\ufffd", "no-answer"),
        ("7" * 9000, "overlong"),
        ("x" * 1_000_000, "overlong"),
    ],
)
def test_bad_output_scores_0_with_a_reason(text: str, reason: str) -> None:
    assert math_reward(text, "42") == Reward(0.0, reason)


def test_a_huge_number_does_not_raise() -> None:
    r = math_reward("1" * 5000, "42")  # math-verify's sympify fails on it
    assert r.value == 0.0
    assert r.reason in ("wrong", "no-answer") or r.reason.startswith("checker-error: ")


def test_a_missing_reference_scores_0() -> None:
    assert math_reward("42", "") == Reward(0.0, "no-reference")


def test_an_exception_inside_the_checker_is_a_reason_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(text: str, answer: str) -> Reward:
        raise ZeroDivisionError("inside the checker")

    monkeypatch.setattr(rewards, "_math_verify", broken)
    monkeypatch.setattr(rewards, "last_number_reward", broken)
    r = math_reward("42", "42")
    assert r.value == 0.0 and r.reason == "checker-error: ZeroDivisionError: inside the checker"


def test_the_fallback_checker_reads_the_last_number() -> None:
    assert last_number_reward("first 3, then 1,234.5", "1234.5").reason == "correct"
    assert last_number_reward("-3.5e2", "-350").value == 1.0
    assert last_number_reward("12", "13").reason == "wrong"
    assert last_number_reward("none here", "13").reason == "no-answer"
    assert last_number_reward("12", "twelve").reason.startswith("checker-error")


def test_the_fallback_is_used_without_math_verify(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rewards, "HAVE_MATH_VERIFY", False)
    assert math_reward("it is 42", "42") == Reward(1.0, "correct", "42")


@pytest.mark.skipif(not rewards.HAVE_MATH_VERIFY, reason="math-verify is not installed")
def test_math_verify_works_outside_the_main_thread() -> None:
    # math-verify's timeout uses SIGALRM, which only the main thread may set.
    out: list[Reward] = []
    thread = threading.Thread(target=lambda: out.append(math_reward(r"\frac{84}{2}", "42")))
    thread.start()
    thread.join()
    assert out == [Reward(1.0, "correct", out[0].extracted)]


def test_reward_functions_are_chosen_by_task_type() -> None:
    assert build_reward("")("42", "42").value == 1.0
    assert build_reward("math", max_chars=3)("42 is it", "42").reason == "overlong"
    with pytest.raises(PluginError, match=r"no reward for task_type 'poetry' \(known: code, math, reasoning_gym"):
        build_reward("poetry")  # never a silent 0


@pytest.fixture
def fresh_scorers() -> Iterator[None]:
    scorer = rewards._reasoning_gym_scorer  # held: a test may monkeypatch the module's name
    scorer.cache_clear()
    yield
    scorer.cache_clear()


def _tasks(name: str, size: int = 5) -> list[tuple[str, str, str]]:
    """(task_type, reference answer column, gold answer) of a reasoning-gym dataset, as the dataflow writes them."""
    rows = load_prompts(ReasoningGymDataset(name=name, size=size, seed=11)).to_pylist()
    return [(r["task_type"], r["answer"], json.loads(r["answer"])["entry"]["answer"]) for r in rows]


@needs_reasoning_gym
@pytest.mark.parametrize("name", ["basic_arithmetic", "chain_sum", "gsm_symbolic"])
def test_reasoning_gym_scores_with_the_generators_own_scorer(name: str) -> None:
    for task_type, ref, gold in _tasks(name):
        reward = build_reward(task_type)
        assert reward(gold, ref) == Reward(1.0, "correct", gold)
        assert reward(f"<think>easy</think>\n<answer> {gold} </answer>", ref) == Reward(1.0, "correct", gold)
        wrong = reward(f"<answer>{int(gold) + 1}</answer>", ref)
        # gsm_symbolic's scorer gives 0.01 for a wrong number (a format credit); the others 0
        assert (wrong.value, wrong.reason) == ((0.01, "partial") if name == "gsm_symbolic" else (0.0, "wrong"))
        assert reward("no idea ###", ref) == Reward(0.0, "wrong", "no idea ###")


@needs_reasoning_gym
@pytest.mark.parametrize(
    ("text", "reason"),
    [("", "empty"), ("  \n", "empty"), ("<answer></answer>", "no-answer"), ("7" * 9000, "overlong")],
)
def test_reasoning_gym_bad_output_scores_0_with_a_reason(text: str, reason: str) -> None:
    ((task_type, ref, _),) = _tasks("chain_sum", size=1)
    assert build_reward(task_type)(text, ref) == Reward(0.0, reason)


@needs_reasoning_gym
def test_reasoning_gym_bad_references_are_reasons_not_crashes(fresh_scorers: None) -> None:
    assert reasoning_gym_reward("3", "") == Reward(0.0, "no-reference")
    for ref in ["not json", "[1, 2]", json.dumps({"generator": "chain_sum"})]:
        r = reasoning_gym_reward("3", ref)
        assert r.value == 0.0 and r.reason.startswith("checker-error: the reference is not a reasoning-gym entry")
    ((_, ref, gold),) = _tasks("chain_sum", size=1)
    gone = json.dumps(json.loads(ref) | {"generator": "no_such_generator"})  # e.g. an older reasoning-gym
    r = reasoning_gym_reward(gold, gone)
    assert r.value == 0.0 and r.reason.startswith("checker-error: ValueError") and "no_such_generator" in r.reason


@needs_reasoning_gym
def test_an_exception_inside_the_reasoning_gym_scorer_is_a_reason(
    monkeypatch: pytest.MonkeyPatch, fresh_scorers: None
) -> None:
    ((task_type, ref, gold),) = _tasks("chain_sum", size=1)
    _, extract = rewards._reasoning_gym_scorer("chain_sum", json.dumps(json.loads(ref)["config"], sort_keys=True))

    def broken(answer: str, entry: object) -> float:
        raise KeyError("metadata")

    monkeypatch.setattr(rewards, "_reasoning_gym_scorer", lambda generator, config: (broken, extract))
    r = build_reward(task_type)(gold, ref)
    assert r == Reward(0.0, "checker-error: KeyError: 'metadata'")
    monkeypatch.setattr(rewards, "_reasoning_gym_scorer", lambda generator, config: (lambda a, e: math.nan, extract))
    assert build_reward(task_type)(gold, ref).reason == "checker-error: reasoning-gym scored nan"


def test_reasoning_gym_missing_is_a_reason_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, fresh_scorers: None
) -> None:
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # import fails as if it were not installed
    ref = json.dumps({"generator": "chain_sum", "config": {}, "entry": {"question": "1 + 2 =", "answer": "3"}})
    r = build_reward("reasoning_gym:chain_sum")("3", ref)
    assert r.value == 0.0 and r.reason.startswith("checker-error: MissingExtraError: reasoning-gym is not installed")
    assert "pip install 'lakeflow[raas]'" in r.reason


def test_task_types_with_a_variant_fall_back_to_their_family() -> None:
    assert build_reward("math:gsm8k")("it is 42", "42").value == 1.0
    assert build_reward("reasoning_gym:chain_sum", max_chars=3)("1234", "{}").reason == "overlong"
    with pytest.raises(PluginError, match="no reward for task_type 'poetry:haiku'"):
        build_reward("poetry:haiku")
