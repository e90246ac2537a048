"""The smallest tool-use task: the answer is a digit that only the `lookup()` tool returns.

Built for the tiny model (`jobs/examples/tiny-agent.yaml`): the prompt says nothing about the digit,
so guessing scores one time in ten and the reward can rise above that only as the model learns to
call the tool and then copy what it returned. The call takes no arguments, so it is always the same
text (one token of the tiny tokenizer, `lakeflow.models.tiny.LOOKUP_CALL`). After a turn that
calls the tool the model has one more turn; the last number in it is its answer. `call_credit`
(default 0) is the reward of an episode that called the tool, then answered a wrong number of the
value's length without calling again: a small credit helps a model that has never seen the tool find
it, and because it asks for an answer of the right shape after the call, the model keeps trying
such numbers there until it copies the right one.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from lakeflow.errors import ConfigError, InputError
from lakeflow.lake.tasks import Task
from lakeflow.raas.agent.env import ChatMessage, Feedback, Tool, Turn
from lakeflow.raas.agent.envs.common import first_messages, made_calls, task_row, without_calls
from lakeflow.raas.outcome import Reward

TASK_TYPE = "agent:lookup"
PROMPT = "Value?"
_NUMBER = re.compile(r"\d+")


class LookupEnv:
    """One episode: call `lookup()`, then answer with the digit it gave."""

    def __init__(self, *, call_credit: float = 0.0, system_prompt: str = "") -> None:
        if not 0.0 <= call_credit < 1.0:
            raise ConfigError(f"lookup: call_credit must be in [0, 1), got {call_credit}")
        self.call_credit = call_credit
        self.system_prompt = system_prompt
        self.value = ""
        self.called = False
        self.final_called = False
        self.final_text = ""

    def reset(self, task: Task) -> list[ChatMessage]:
        if not task.answer.strip().isdigit():
            raise InputError(
                f"lookup: the task's answer must be the digits the tool returns, got {task.answer[:40]!r}: "
                "generate the dataset with `python -m lakeflow.raas.agent.envs lookup`"
            )
        self.value, self.called, self.final_called, self.final_text = task.answer.strip(), False, False, ""
        return first_messages(task.prompt, self.system_prompt)

    def tools(self) -> Sequence[Tool]:
        return [Tool("lookup", "Return the value.", {"type": "object", "properties": {}}, self.lookup)]

    def lookup(self) -> str:
        """The tool: the task's value."""
        self.called = True
        return self.value

    def step(self, turn: Turn) -> Feedback:
        self.final_text, self.final_called = turn.text, made_calls(turn)
        return Feedback(done=turn.index >= 1 or not self.final_called)  # one turn to call, one to answer

    def final_reward(self) -> Reward:
        numbers = _NUMBER.findall(without_calls(self.final_text))
        given = numbers[-1] if numbers else ""
        if given == self.value:
            return Reward(1.0, "correct", given)
        if not self.called:
            return Reward(0.0, "wrong" if given else "no-answer", given)
        if self.final_called or len(given) != len(self.value):  # the credit is for calling, then answering
            return Reward(0.0, "called-no-answer", given)  # ... a number of the value's length
        return Reward(self.call_credit, "called-wrong", given)


def make_tasks(n: int, seed: int = 0, *, digits: int = 1, prompt: str = PROMPT) -> list[dict[str, str]]:
    """`n` tasks whose answer is a random number of `digits` digits (the prompt is the same for all)."""
    if n < 1 or not 1 <= digits <= 6:
        raise InputError(f"lookup: n must be >= 1 and digits 1-6, got {n}, {digits}")
    rng = random.Random(f"lookup-{seed}-{digits}")
    return [
        task_row(f"lookup-{seed}-{i}", prompt, "".join(rng.choice("0123456789") for _ in range(digits)), TASK_TYPE)
        for i in range(n)
    ]
