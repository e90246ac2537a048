"""Math rewards: right and wrong answers, and every kind of bad output scoring 0 with a reason."""

from __future__ import annotations

import threading

import pytest

from lakeflow.raas import rewards
from lakeflow.raas.rewards import Reward, build_reward, last_number_reward, math_reward


@pytest.mark.parametrize("text", ["42", "The answer is 42.", r"so \boxed{42}", "42.0", "x = 7 * 6 = 42"])
def test_a_correct_answer_scores_1(text: str) -> None:
    r = math_reward(text, "42")
    assert (r.value, r.reason) == (1.0, "correct")


@pytest.mark.parametrize("text", ["41", "The answer is 43.", "42, no wait, 24"])
def test_a_wrong_answer_scores_0(text: str) -> None:
    r = math_reward(text, "42")
    assert (r.value, r.reason) == (0.0, "wrong") and r.extracted


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
    r = build_reward("poetry")("42", "42")
    assert r.value == 0.0 and "no reward function for task_type 'poetry'" in r.reason
