"""The checks of a judge section before a rollout service starts; they read files and the environment and
never contact the endpoint (a judge that is down when the run starts is waited for, like one that goes down)."""

from __future__ import annotations

import os

from lakeflow.errors import ConfigError
from lakeflow.raas.config.judge import JudgeConfig

JUDGED_WORKFLOWS = ("rlvr",)  # the workflows whose samples a judge scores (the runner generates them itself)


def judge_problems(judge: JudgeConfig, workflow: str, key: str) -> list[str]:
    """Problems of `judge` (at `key`) for a pool of `workflow`, one line each: a workflow the judge does not
    score, a rubric file that cannot be read."""
    problems = []
    if workflow not in JUDGED_WORKFLOWS:
        problems.append(
            f"{key}: a judge scores workflow {', '.join(JUDGED_WORKFLOWS)} only, not {workflow!r} (its rewards are "
            "functions or its environment's); use workflow rlvr or a reward function"
        )
    if judge.rubric_file is not None:
        try:
            judge.rubric_text()
        except ConfigError as e:
            problems.append(f"{key}.rubric_file: {e}")
    return problems


def judge_here_problems(judge: JudgeConfig, key: str) -> list[str]:
    """What this machine lacks to call `judge` (at `key`): the API key's environment variable."""
    if judge.api_key_env is None or os.environ.get(judge.api_key_env):
        return []
    return [
        f"{key}.api_key_env: the environment variable {judge.api_key_env!r} is not set here: export it with the "
        "judge endpoint's API key, or drop api_key_env for an endpoint without keys"
    ]
