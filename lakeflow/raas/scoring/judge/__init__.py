"""Judges: rewards that ask a model. A pool's `reward: {type: judge, ...}` has a model behind an
OpenAI-compatible endpoint score its rlvr completions by a rubric (docs/judges.md).

`JudgeConfig` is the config room's (`raas/config/judge.py`); `prompts.py`: the judge's messages and the
verdict format; `client.py`: the endpoint through the `openai` client, with retries, on a bounded thread
pool; `scoring.py`: one group's verdicts; `judge_scorer.py`: `JudgeScorer`, the scorer that holds a group
until every sample has one.
"""

from lakeflow.raas.config.judge import JudgeConfig

__all__ = ["JudgeConfig"]
