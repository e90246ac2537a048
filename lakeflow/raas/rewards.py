"""Verifiable rewards: score a completion against a task's reference answer, never raising.

Every outcome is a `Reward` (value, reason); bad output (empty, no answer, garbage, overlong,
an exception inside the checker) scores 0.0 with a reason that the workflow stores in the
sample's `extra`. Math answers are checked with `math-verify` when it is installed, else by
the fallback: the last number in the text compared numerically (relative tolerance 1e-6). An answer
that restates an arithmetic expression instead of its value ("407 + 66" for 473), which math-verify
would evaluate and accept, scores 0 ("unevaluated") unless the reference is written that way.
Task types `reasoning_gym:<generator>` are scored by that reasoning-gym generator's own
`score_answer` (reasoning-gym is imported on first use).

Which function scores a task: the config's `reward` when set (a name in `REWARDS`, an import path
`package.module:attr` or an entry-point name in `lakeflow.rewards`), else the task's `task_type`
(a name in `REWARDS`, its family before ':', or an entry-point name). A task type that matches
none is a `PluginError`, never a silent 0. A plugin's function `(text, answer) -> Reward` (or a
number) is wrapped so it too never raises on bad output.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import math
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lakeflow.errors import MissingExtraError, PluginError
from lakeflow.plugins import GROUPS, call_problem, entry_point_names, resolve
from lakeflow.raas.code import code_reward
from lakeflow.raas.outcome import Reward, RewardFn
from lakeflow.raas.repo_tests import repo_tests_partial_reward, repo_tests_reward

__all__ = [
    "REWARDS",
    "PluginReward",
    "Reward",
    "RewardFn",
    "build_reward",
    "last_number_reward",
    "math_reward",
    "reasoning_gym_reward",
]

log = logging.getLogger(__name__)

_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")
_SHOWN = 64  # characters of the extracted answer kept in the reason
# An unevaluated sum, difference, product or power of numbers ("407 + 66" for 473). math-verify evaluates it
# and calls it right, so a policy learns to restate the question instead of answering it (SmolLM2 adding did,
# from version 6 on). It scores 0 ("unevaluated") unless the reference itself is written that way.
_UNEVALUATED = re.compile(r"\d\s*(?:[-+*×·^]|\\times|\\cdot)\s*[\d(\\{]")


def unscorable(text: str, answer: str, max_chars: int) -> Reward | None:
    """The 0 reward of a pair no checker needs to see (no reference, empty, overlong), else None."""
    if not answer.strip():
        return Reward(0.0, "no-reference")
    if not text.strip():
        return Reward(0.0, "empty")
    if len(text) > max_chars:
        return Reward(0.0, "overlong")
    return None


def math_reward(text: str, answer: str, max_chars: int = 8192) -> Reward:
    """1.0 when the completion's final answer equals the reference, else 0.0 with the reason."""
    if (bad := unscorable(text, answer, max_chars)) is not None:
        return bad
    try:
        return _math_verify(text, answer) if HAVE_MATH_VERIFY else last_number_reward(text, answer)
    except _checker_errors() as e:  # a checker bug or timeout costs one sample's reward, not the service
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


# math-verify (and sympy under it, ~0.4 s) is imported by the first math score, not by every process that
# builds a reward (the launcher's checks; services that score code or ask a judge).
HAVE_MATH_VERIFY = importlib.util.find_spec("math_verify") is not None


def _checker_errors() -> tuple[type[BaseException], ...]:
    """What a checker may raise: Exception, and math-verify's timeout (a BaseException) once it is loaded."""
    errors = sys.modules.get("math_verify.errors")
    return (Exception, errors.TimeoutException) if errors else (Exception,)


def _math_verify(text: str, answer: str) -> Reward:
    # math-verify's timeouts use SIGALRM, which only the main thread may set; elsewhere run without.
    from math_verify import parse as _mv_parse
    from math_verify import verify as _mv_verify

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
    if ok and _UNEVALUATED.search(str(pred[-1])) and not _UNEVALUATED.search(answer):
        return Reward(0.0, "unevaluated", shown)
    return Reward(1.0 if ok else 0.0, "correct" if ok else "wrong", shown)


def reasoning_gym_reward(text: str, answer: str, max_chars: int = 8192) -> Reward:
    """The score of the reasoning-gym generator that made the task; `answer` is the JSON the dataflow wrote.

    That JSON is {generator, config, entry}: the generator is rebuilt with its config and its
    `score_answer(given, entry)` called, where `given` is the last <answer>…</answer> of the
    completion if it has one, else the whole completion. Scores below 1 that are not 0 (partial
    credit, or a format credit such as gsm_symbolic's 0.01 for a wrong number) are kept as given.
    """
    if (bad := unscorable(text, answer, max_chars)) is not None:
        return bad
    try:
        ref = json.loads(answer)
        generator, config, entry = ref["generator"], ref["config"], ref["entry"]
    except (ValueError, TypeError, KeyError) as e:
        return Reward(0.0, f"checker-error: the reference is not a reasoning-gym entry ({type(e).__name__}: {e})")
    try:
        score, extract = _reasoning_gym_scorer(generator, json.dumps(config, sort_keys=True))
        given = extract(text)
        given = text.strip() if given is None else given
        if not given:
            return Reward(0.0, "no-answer")
        value = float(score(given, entry))
    except _checker_errors() as e:  # MissingExtraError included: it names the package to install
        return Reward(0.0, f"checker-error: {type(e).__name__}: {str(e)[:200]}")
    if not math.isfinite(value):
        return Reward(0.0, f"checker-error: reasoning-gym scored {value}")
    reason = "correct" if value >= 1.0 else "partial" if value > 0 else "wrong"
    return Reward(value, reason, given[:_SHOWN])


@functools.lru_cache(maxsize=64)
def _reasoning_gym_scorer(generator: str, config_json: str) -> tuple[Callable[..., Any], Callable[[str], str | None]]:
    """(score_answer of the generator built with this config, reasoning-gym's <answer> tag extractor)."""
    try:
        import reasoning_gym
        from reasoning_gym.utils import extract_answer
    except ImportError as e:
        raise MissingExtraError("reasoning-gym", "raas") from e
    return reasoning_gym.create_dataset(generator, **json.loads(config_json)).score_answer, extract_answer


REWARDS: dict[str, RewardFn] = {
    "math": math_reward,
    "reasoning_gym": reasoning_gym_reward,
    "code": code_reward,
    "repo_tests": repo_tests_reward,  # a repository task's tests run in its episode's workspace (docs/tasks.md)
    "repo_tests_partial": repo_tests_partial_reward,
}
_TAKE_MAX_CHARS = (math_reward, reasoning_gym_reward)


def _shape(obj: object) -> str | None:
    return call_problem(obj, "", "", what="(text, answer)")


@dataclass(frozen=True)
class PluginReward:
    """A user's reward function, made to behave like the shipped ones: overlong completions score 0
    unseen, an exception scores 0 with the reason, a number becomes a Reward; anything else it returns
    is a PluginError (a broken plugin stops the service rather than scoring every sample 0)."""

    fn: Callable[[str, str], object]
    name: str
    max_chars: int = 8192

    def __call__(self, text: str, answer: str) -> Reward:
        if len(text) > self.max_chars:
            return Reward(0.0, "overlong")
        try:
            out = self.fn(text, answer)
        except _checker_errors() as e:  # the plugin's bug on one completion costs that sample's reward
            return Reward(0.0, f"checker-error: {type(e).__name__}: {str(e)[:200]}")
        if isinstance(out, Reward):
            value, reason = out.value, out.reason
        elif isinstance(out, int | float):
            value, reason = float(out), "scored"
        else:
            raise PluginError(f"reward {self.name!r} returned {type(out).__name__}, not a Reward or a number")
        if not math.isfinite(value):
            return Reward(0.0, f"checker-error: reward {self.name!r} returned {value}")
        return out if isinstance(out, Reward) else Reward(value, reason)


@functools.lru_cache(maxsize=256)
def _function(task_type: str, reward: str | None, key: str) -> tuple[RewardFn, str]:
    """(the scoring function, its name) for a task type or an explicit reward name; cached per process."""
    if reward is not None:
        return resolve("reward", reward, REWARDS, key=key, check=_shape), reward
    name = task_type or "math"
    family = name.partition(":")[0]
    for candidate in (name, family):
        if candidate in REWARDS:
            return REWARDS[candidate], candidate
    registered = entry_point_names("reward")
    for candidate in (name, family):
        if candidate in registered:
            return resolve("reward", candidate, REWARDS, key=key, check=_shape), candidate
    known = ", ".join(sorted(REWARDS) + [n for n in registered if n not in REWARDS])
    raise PluginError(
        f"no reward for task_type {task_type!r} (known: {known}): set `reward` in the rollout config (a shipped "
        f"name, 'package.module:attr' or a name registered in {GROUPS['reward']!r}), or give the dataset's rows "
        "a task_type that has one"
    )


def build_reward(task_type: str, max_chars: int = 8192, reward: str | None = None, key: str = "reward") -> RewardFn:
    """The reward function of a task: `reward` when given, else the task type's ('' means math,
    'family:variant' falls back to 'family', else an entry-point name). PluginError when there is none."""
    fn, name = _function(task_type, reward, key)
    if fn in _TAKE_MAX_CHARS:
        return functools.partial(fn, max_chars=max_chars)
    if fn in REWARDS.values():
        return fn
    return PluginReward(fn, name, max_chars)
