"""Shared by the judge tests: a judge runner over the scripted engine, advanced until groups come out, and
replies of a stand-in judge that grades by the answers it is shown (tests/raas/judge_server.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from lakeflow.raas.groups import Group
from lakeflow.raas.scoring.judge import JudgeConfig
from lakeflow.raas.scoring.runner import ScoredRunner
from tests.raas.judge_server import Answer, candidates

RUBRIC = "The answer must equal the reference."
FAST = {"backoff_s": 0.01, "backoff_max_s": 0.02, "timeout_s": 30}  # retries at once; no test waits on a backoff


def grade(answer: str) -> float:
    """The stand-in judge's score of an answer: 1 for '7', 0 for '8', 0.5 for anything else."""
    return {"7": 1.0, "8": 0.0}.get(answer.strip(), 0.5)


async def grader(body: dict[str, Any]) -> Answer:
    """A judge that follows the verdict format: one SCORE line, or one per labelled answer."""
    shown = candidates(body)
    if "SCORE <label>" in body["messages"][0]["content"]:
        return "Compared them.\n" + "\n".join(f"SCORE {i}: {grade(a)}" for i, a in enumerate(shown, start=1))
    return f"Checked against the reference.\nSCORE: {grade(shown[0])}"


def judge_config(url: str, **kw: Any) -> JudgeConfig:
    return JudgeConfig.model_validate({"endpoint": url, "model": "judge-model", "rubric": RUBRIC, **FAST, **kw})


def drive(runner: ScoredRunner, n: int = 1, timeout_s: float = 60) -> list[Group]:
    """Advance `runner` (as the service's loop does) until `n` groups have come out."""
    out: list[Group] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < n:
        assert time.monotonic() < deadline, f"{len(out)} of {n} groups came out in {timeout_s} s"
        out += runner.advance(0.02)
    return out


def advance_for(runner: ScoredRunner, seconds: float) -> list[Group]:
    """Advance `runner` for `seconds`: the groups that came out (none, for a group the runner holds)."""
    out: list[Group] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        out += runner.advance(0.02)
    return out


def wait_for(condition: Callable[[], bool], runner: ScoredRunner, timeout_s: float = 60) -> list[Group]:
    """Advance `runner` until `condition()` holds; the groups that came out meanwhile."""
    out: list[Group] = []
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"condition not met in {timeout_s} s"
        out += runner.advance(0.02)
    return out
