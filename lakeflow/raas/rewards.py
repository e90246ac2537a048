"""Verifiable rewards: score a completion against a task's reference answer, never raising.

Every outcome is a `Reward` (value, reason); bad output (empty, no answer, garbage, overlong,
an exception inside the checker) scores 0.0 with a reason that the workflow stores in the
sample's `extra`. Math answers are checked with `math-verify` when it is installed, else by
the fallback: the last number in the text compared numerically (relative tolerance 1e-6).
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")
_SHOWN = 64  # characters of the extracted answer kept in the reason


@dataclass(frozen=True)
class Reward:
    """A score and why: 'correct', 'wrong', 'empty', 'no-answer', 'overlong', 'no-reference', 'checker-error: …'."""

    value: float
    reason: str
    extracted: str = ""  # the answer the checker read from the completion, shortened


RewardFn = Callable[[str, str], Reward]  # (completion text, reference answer) -> Reward


def math_reward(text: str, answer: str, max_chars: int = 8192) -> Reward:
    """1.0 when the completion's final answer equals the reference, else 0.0 with the reason."""
    if not answer.strip():
        return Reward(0.0, "no-reference")
    if not text.strip():
        return Reward(0.0, "empty")
    if len(text) > max_chars:
        return Reward(0.0, "overlong")
    try:
        return _math_verify(text, answer) if HAVE_MATH_VERIFY else last_number_reward(text, answer)
    except _CHECKER_ERRORS as e:  # a checker bug or timeout costs one sample's reward, not the service
        return Reward(0.0, f"checker-error: {type(e).__name__}: {str(e)[:200]}")


def last_number_reward(text: str, answer: str) -> Reward:
    """The fallback checker: the last number in `text` against the reference, numerically."""
    gold = _last_number(answer)
    if gold is None:
        return Reward(0.0, "checker-error: reference is not a number (the fallback checker reads numbers only)")
    found = _last_number(text)
    if found is None:
        return Reward(0.0, "no-answer")
    shown = f"{found:g}"[:_SHOWN]
    ok = math.isclose(found, gold, rel_tol=1e-6, abs_tol=1e-9)
    return Reward(1.0 if ok else 0.0, "correct" if ok else "wrong", shown)


def _last_number(text: str) -> float | None:
    for match in reversed(_NUMBER.findall(text)):
        try:
            value = float(match.replace(",", ""))
        except ValueError:
            continue
        if math.isfinite(value):
            return value
    return None


_CHECKER_ERRORS: tuple[type[BaseException], ...] = (Exception,)
try:
    from math_verify import parse as _mv_parse
    from math_verify import verify as _mv_verify
    from math_verify.errors import TimeoutException

    HAVE_MATH_VERIFY = True
    _CHECKER_ERRORS = (Exception, TimeoutException)  # TimeoutException derives from BaseException
except ImportError:  # the fallback checker is used
    HAVE_MATH_VERIFY = False


def _math_verify(text: str, answer: str) -> Reward:
    # math-verify's timeouts use SIGALRM, which only the main thread may set; elsewhere run without.
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    gold = _mv_parse(answer, parsing_timeout=timeout, raise_on_error=True)
    if not gold:
        gold = _mv_parse(f"${answer}$", parsing_timeout=timeout, raise_on_error=True)
    if not gold:
        return Reward(0.0, "checker-error: reference answer cannot be parsed")
    pred = _mv_parse(text, parsing_timeout=timeout, raise_on_error=True)
    if not pred:
        return Reward(0.0, "no-answer")
    shown = str(pred[-1])[:_SHOWN]
    ok = _mv_verify(gold, pred, timeout_seconds=timeout, raise_on_error=True)
    return Reward(1.0 if ok else 0.0, "correct" if ok else "wrong", shown)


REWARDS: dict[str, RewardFn] = {"math": math_reward}


def build_reward(task_type: str, max_chars: int = 8192) -> RewardFn:
    """The reward function of a task type ('' means math); an unknown type scores 0 with a reason."""
    fn = REWARDS.get(task_type or "math")
    if fn is None:
        known = ", ".join(sorted(REWARDS))
        return lambda text, answer: Reward(0.0, f"no reward function for task_type {task_type!r} (known: {known})")
    if fn is math_reward:
        return lambda text, answer: math_reward(text, answer, max_chars)
    return fn
