"""Math with a Python interpreter: the model may run programs in the sandbox, then answers in <answer> tags.

Tasks are any math dataset's rows: a reasoning-gym generator (`dataset: {type: reasoning_gym, ...}`,
scored by that generator's own checker) or rows of a file with numeric answers (task_type `math`).
The `python` tool runs the model's code with `lakeflow.raas.sandbox.run_python` under its time,
memory and output limits and returns what the program printed. The episode ends at the first turn
without a tool call; its last <answer>...</answer> (or its whole text) goes to the task type's checker.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from lakeflow.errors import ConfigError
from lakeflow.lake.tasks import Task
from lakeflow.raas.agent.env import ChatMessage, Feedback, Tool, Turn
from lakeflow.raas.agent.envs.common import answer_tag, first_messages, made_calls
from lakeflow.raas.outcome import Reward
from lakeflow.raas.rewards import build_reward
from lakeflow.raas.sandbox import Limits, Mode, run_python

SYSTEM = (
    "Solve the problem. You can run Python with the python tool; print the values you need. "
    "When you are done, give only the final answer inside <answer></answer>."
)
PARAMETERS = {
    "type": "object",
    "properties": {"code": {"type": "string", "description": "A Python 3 program; its printed output is returned."}},
    "required": ["code"],
}


class PythonMathEnv:
    """One episode of math with a sandboxed Python tool."""

    def __init__(
        self,
        *,
        wall_s: float = 5.0,
        memory_mb: int = 256,
        output_chars: int = 2000,
        sandbox: Mode = "auto",
        system_prompt: str = SYSTEM,
    ) -> None:
        if not wall_s > 0 or memory_mb < 16 or output_chars < 1:
            raise ConfigError(
                f"python_math: wall_s must be > 0, memory_mb >= 16 and output_chars >= 1 "
                f"(got {wall_s}, {memory_mb}, {output_chars})"
            )
        self.limits = Limits(
            wall_s=wall_s, cpu_s=max(1, math.ceil(wall_s)), memory_mb=memory_mb, output_bytes=4 * output_chars
        )
        self.output_chars = output_chars
        self.sandbox: Mode = sandbox
        self.system_prompt = system_prompt
        self.task: Task | None = None
        self.final_text = ""
        self.runs = 0

    def reset(self, task: Task) -> list[ChatMessage]:
        self.task, self.final_text, self.runs = task, "", 0
        return first_messages(task.prompt, self.system_prompt)

    def tools(self) -> Sequence[Tool]:
        description = "Run a Python program and return what it prints (stdout, then stderr and how it ended)."
        return [Tool("python", description, PARAMETERS, self.run)]

    def run(self, code: str) -> str:
        """The tool: the program's output, shortened to `output_chars`, with its exit status when not 0."""
        if not isinstance(code, str) or not code.strip():
            return "error: `code` must be a non-empty string of Python source"
        self.runs += 1
        result = run_python(code, limits=self.limits, mode=self.sandbox)
        parts = [result.stdout]
        if result.stderr:
            parts.append(f"[stderr]\n{result.stderr}")
        if result.limit:
            parts.append(f"[stopped: {result.limit} limit]")
        elif result.exit_code:
            parts.append(f"[exit code {result.exit_code}]")
        text = "\n".join(p.rstrip("\n") for p in parts if p).strip() or "[no output: print the values you need]"
        return text if len(text) <= self.output_chars else text[: self.output_chars] + "\n[output cut]"

    def step(self, turn: Turn) -> Feedback:
        self.final_text = turn.text
        return Feedback(done=not made_calls(turn))

    def final_reward(self) -> Reward:
        if self.task is None:
            raise ValueError("python_math: final_reward() before reset()")
        given = answer_tag(self.final_text)  # the checkers look for the answer in the text they get
        return build_reward(self.task.task_type)(self.final_text if given is None else given, self.task.answer)
