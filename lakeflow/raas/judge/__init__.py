"""Judges: rewards that ask a model. A pool's `reward: {type: judge, ...}` has a model behind an
OpenAI-compatible endpoint score its rlvr completions by a rubric (docs/judges.md).

`config.py`: `JudgeConfig`; `prompts.py`: the judge's messages and the verdict format; `client.py`: the
endpoint through the `openai` client, with retries, on a bounded thread pool; `scoring.py`: one group's
verdicts; `runner.py`: `JudgeRunner`, the group runner that holds a group until every sample has one.
"""

from lakeflow.raas.config.judge import JudgeConfig

__all__ = ["JudgeConfig"]
