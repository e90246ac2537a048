"""Multiplication with a `multiply` tool: a task a small pretrained model fails alone and solves with the tool.

SmolLM2-135M-Instruct does not multiply two 3-digit numbers in its head; with `multiply(a, b)` it only has
to copy the numbers into the call and the product into its answer (`jobs/examples/smollm2-calculator.yaml`).
An episode has at most `max_turns` assistant turns: turns that call the tool get its result back, a turn
without a call ends the episode, and the last number of the final turn (less its tool-call markup) is the
answer, right or wrong. `make_demos` writes conversations that do it right, for the trainer's warm-up.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any

from lakeflow.errors import ConfigError, InputError
from lakeflow.lake.tasks import Task
from lakeflow.raas.agent.env import ChatMessage, Feedback, Tool, Turn
from lakeflow.raas.agent.envs.common import first_messages, made_calls, task_row, without_calls
from lakeflow.raas.outcome import Reward

TASK_TYPE = "agent:calculator"
_NUMBER = re.compile(r"-?\d+")
PARAMETERS = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
}


def prompt(a: int, b: int) -> str:
    return f"What is {a} * {b}? Use the multiply tool, then reply with just the number."


class CalculatorEnv:
    """One episode: multiply with the tool, then answer with the product."""

    def __init__(self, *, max_turns: int = 3, system_prompt: str = "") -> None:
        if not 2 <= max_turns <= 10:
            raise ConfigError(f"calculator: max_turns must be 2-10 (a call, then an answer), got {max_turns}")
        self.max_turns = max_turns
        self.system_prompt = system_prompt
        self.product = ""
        self.final_text = ""

    def reset(self, task: Task) -> list[ChatMessage]:
        if not _NUMBER.fullmatch(task.answer.strip()):
            raise InputError(
                f"calculator: the task's answer must be the product, got {task.answer[:40]!r}: generate the "
                "dataset with `python -m lakeflow.raas.agent.envs calculator`"
            )
        self.product, self.final_text = task.answer.strip(), ""
        return first_messages(task.prompt, self.system_prompt)

    def tools(self) -> Sequence[Tool]:
        return [Tool("multiply", "Multiply two integers.", PARAMETERS, self.multiply)]

    def multiply(self, a: Any = None, b: Any = None) -> str:
        """The tool: a * b of two integers (an error text for anything else)."""
        if not all(isinstance(x, int) and not isinstance(x, bool) and abs(x) < 10**12 for x in (a, b)):
            return "error: multiply takes two integers a and b"
        return str(a * b)

    def step(self, turn: Turn) -> Feedback:
        self.final_text = turn.text
        return Feedback(done=turn.index + 1 >= self.max_turns or not made_calls(turn))

    def final_reward(self) -> Reward:
        numbers = _NUMBER.findall(without_calls(self.final_text))
        given = numbers[-1] if numbers else ""
        if given == self.product:
            return Reward(1.0, "correct", given)
        return Reward(0.0, "wrong" if given else "no-answer", given)


def _operands(n: int, seed: int, digits: int, salt: str) -> list[tuple[int, int]]:
    if n < 1 or not 1 <= digits <= 6:
        raise InputError(f"calculator: n must be >= 1 and digits 1-6, got {n}, {digits}")
    rng = random.Random(f"calculator-{salt}-{seed}-{digits}")
    low, high = 10 ** (digits - 1), 10**digits - 1
    return [(rng.randint(low, high), rng.randint(low, high)) for _ in range(n)]


def make_tasks(n: int, seed: int = 0, *, digits: int = 3) -> list[dict[str, str]]:
    """`n` tasks: the product of two random numbers of `digits` digits."""
    return [
        task_row(f"calculator-{seed}-{i}", prompt(a, b), str(a * b), TASK_TYPE)
        for i, (a, b) in enumerate(_operands(n, seed, digits, "tasks"))
    ]


def make_demos(n: int, seed: int = 0, *, digits: int = 3) -> list[dict[str, Any]]:
    """`n` conversations that call the tool and answer its result, in the OpenAI chat format (the trainer's
    `warmup.data`); their operands are drawn apart from make_tasks' (another stream of the same seed)."""
    schema = CalculatorEnv().tools()[0].schema()
    demos = []
    for a, b in _operands(n, seed, digits, "demos"):
        call = {"type": "function", "id": "call-0", "function": {"name": "multiply", "arguments": {"a": a, "b": b}}}
        messages = [
            {"role": "user", "content": prompt(a, b)},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "name": "multiply", "content": str(a * b)},
            {"role": "assistant", "content": str(a * b)},
        ]
        demos.append({"tools": [schema], "messages": messages})
    return demos
