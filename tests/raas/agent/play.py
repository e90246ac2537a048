"""Plays an environment with hand-written assistant turns, as the rollout service would: each turn's
Hermes `<tool_call>` JSON is parsed, the named tool run with its arguments, and the results handed to
`step`. A test stand-in for the runner (only the tool-call plumbing; no model, no tokens)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from lakeflow.lake.tasks import Task
from lakeflow.raas.agent.env import ChatMessage, Environment, Feedback, ToolCall, ToolResult, Turn
from lakeflow.raas.outcome import Reward

_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def task_of(row: dict[str, str]) -> Task:
    """The task the dataflow would issue for one dataset row."""
    return Task(
        task_id=f"t-{row['prompt_id']}",
        model_id="policy",
        prompt_id=row["prompt_id"],
        prompt=row["prompt"],
        answer=row.get("answer", ""),
        task_type=row.get("task_type", ""),
        n_samples=1,
        issued_at=datetime.now(UTC),
    )


def call(name: str, **arguments: object) -> str:
    """The text of one tool call in the Hermes format."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def run_turn(env: Environment, text: str, index: int) -> Turn:
    """The turn `text` with its calls run against the environment's tools."""
    tools = {tool.name: tool for tool in env.tools()}
    results, malformed = [], 0
    for body in _CALL.findall(text):
        try:
            parsed = json.loads(body)
            name, arguments = parsed["name"], parsed.get("arguments", {})
        except (ValueError, KeyError, TypeError):
            malformed += 1
            continue
        made = ToolCall(name, arguments)
        if name not in tools:
            results.append(ToolResult(made, "", error="unknown tool"))
            continue
        try:
            results.append(ToolResult(made, tools[name].fn(**arguments)))
        except TypeError as e:
            results.append(ToolResult(made, "", error=f"bad arguments: {e}"))
    return Turn(text=text, results=results, malformed_calls=malformed, index=index)


@dataclass
class Episode:
    messages: list[ChatMessage]
    turns: list[Turn] = field(default_factory=list)
    feedback: list[Feedback] = field(default_factory=list)
    reward: Reward | None = None


Policy = Sequence[str] | Callable[["Episode"], str]  # the assistant's turns, or a function of the episode so far


def play(env: Environment, task: Task, policy: Policy, max_turns: int = 20) -> Episode:
    """Reset, then feed assistant turns (a list, or a function of the episode so far) until done."""
    episode = Episode(list(env.reset(task)))
    for index in range(max_turns):
        if isinstance(policy, Sequence):
            if index >= len(policy):
                break
            text = policy[index]
        else:
            text = policy(episode)
        turn = run_turn(env, text, index)
        feedback = env.step(turn)
        episode.turns.append(turn)
        episode.feedback.append(feedback)
        episode.messages.append({"role": "assistant", "content": text})
        episode.messages += [{"role": "tool", "content": r.error or r.content} for r in turn.results]
        episode.messages += feedback.messages
        if feedback.done:
            break
    episode.reward = env.final_reward()
    return episode


def last_results(episode: Episode) -> list[str]:
    """The observation texts of the latest turn's calls."""
    return [r.content for r in episode.turns[-1].results] if episode.turns else []
