"""An example lakeflow plugin: a dataset loader, a reward and a workflow, none of them inside lakeflow.

- `sums(count, total, seed)`: prompt rows "What is a + b?" whose answer is always `total` (the shape of
  the sevens task of jobs/examples/tiny-math.yaml, small enough for the tiny model), each row of task_type
  `example_exact`;
- `exact(text, answer)`: 1.0 when the first whole number in the completion is the answer; its reasons
  start with "example:" so a query over the lake shows which reward scored a sample;
- `single_turn(task, engines, reward, sampling)`: one prompt, n sampled completions, each scored.

`pyproject.toml` registers them as entry points (`example_sums`, `example_exact`, `example_single_turn`);
without installing the package they are reached by import path (`lakeflow_example_plugin:sums`).
"""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Iterator, Mapping

from lakeflow.lake.tasks import Task
from lakeflow.raas.engines import Engine
from lakeflow.raas.outcome import Reward, RewardFn
from lakeflow.raas.workflows import POLICY, Sampling, Trajectory, plays, task_messages

_WHOLE_NUMBER = re.compile(r"-?\d+")


def sums(count: int = 64, total: int = 7, seed: int = 0) -> Iterator[dict[str, str]]:
    """`count` prompts "What is a + b?" with a + b == total, as rows the dataflow issues as tasks."""
    rng = random.Random(seed)
    for i in range(count):
        a = rng.randint(0, total)
        yield {
            "prompt_id": f"sum-{seed}-{i}",
            "prompt": f"What is {a} + {total - a}? Answer with the number only.",
            "answer": str(total),
            "task_type": "example_exact",  # scored by the reward registered under this name
        }


def exact(text: str, answer: str) -> Reward:
    """1.0 when the completion's first whole number equals the answer, else 0.0; never raises."""
    found = _WHOLE_NUMBER.search(text)
    if found is None:
        return Reward(0.0, "example: no number")
    ok = found.group() == answer.strip()
    return Reward(1.0 if ok else 0.0, "example: exact" if ok else "example: wrong", found.group())


@plays(POLICY)
def single_turn(task: Task, engines: Mapping[str, Engine], reward: RewardFn, sampling: Sampling) -> list[Trajectory]:
    """The task's prompt, `task.n_samples` completions from the policy, a reward for each."""
    engine = engines[POLICY]
    prompt_ids = engine.encode_chat(task_messages(task))
    max_tokens = max(1, min(sampling.max_tokens, engine.max_model_len - len(prompt_ids)))
    (completions,) = engine.generate([prompt_ids], task.n_samples, max_tokens, sampling.temperature)
    out = []
    for c in completions:
        r = reward(c.text, task.answer)
        out.append(
            Trajectory(
                role=POLICY,
                episode_id=uuid.uuid4().hex,
                prompt_ids=c.prompt_ids,
                response_ids=c.token_ids,
                response_logprobs=c.logprobs,
                loss_mask=[1] * len(c.token_ids),  # every response token was sampled by the policy
                reward=r.value,
                finish_reason=c.finish_reason,
                extra={"reward_reason": r.reason, "temperature": sampling.temperature, "workflow": "example"},
            )
        )
    return out
