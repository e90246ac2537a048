"""The environment interface of multi-turn, tool-using episodes: what a user's environment implements.

An environment is the user's code, not lakeflow's. Per episode the rollout service builds one
(`factory(**args)`, the factory named by the config: a shipped name, `package.module:attr`, or an
entry point in the group `lakeflow.environments`) and plays it:

1. `reset(task)` gives the first chat messages; `tools()` the tools the model may call (their JSON
   schemas go to the chat template's `tools=`, so the model sees them in its own format);
2. the model writes an assistant turn; the service parses its tool calls (Hermes/Qwen `<tool_call>`
   JSON by default), runs each tool with the configured time and memory limits, and hands the turn
   with the results to `step(turn)`, which answers with further observation messages (a game's reply,
   a nudge), an optional per-turn reward, and whether the episode is done;
3. when it is done (or a limit ends it), `final_reward()` scores the episode.

Tool results and observations are tokenized once and appended with loss_mask 0; the model's own
tokens are kept verbatim with their logprobs (token-in, token-out: nothing is re-tokenized).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from lakeflow.lake.tasks import Task
from lakeflow.raas.outcome import Reward

ChatMessage = Mapping[str, Any]  # {"role": "user" | "assistant" | "tool" | "system", "content": str, ...}


@dataclass(frozen=True)
class Tool:
    """A Python callable the model may call, described by a JSON schema of its keyword arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any]  # JSON schema of the arguments object: {"type": "object", "properties": ...}
    fn: Callable[..., str]  # called with the parsed arguments as keyword arguments; returns the observation text

    def schema(self) -> dict[str, Any]:
        """The tool in the function-calling format chat templates take (`tools=[...]`)."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": dict(self.parameters)},
        }


@dataclass(frozen=True)
class ToolCall:
    """One call the model made, parsed from its turn."""

    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class ToolResult:
    """A call and what running it gave: the observation text, or an error (the model sees it as text too)."""

    call: ToolCall
    content: str
    error: str | None = None  # 'unknown tool', 'timeout after 2s', 'bad arguments: ...', the exception
    seconds: float = 0.0


@dataclass(frozen=True)
class Turn:
    """What the environment sees of one assistant turn."""

    text: str  # the assistant's text as decoded (tool-call markup included)
    results: Sequence[ToolResult] = ()  # its tool calls, already run by the service, in order
    malformed_calls: int = 0  # calls that could not be parsed (each got an error observation)
    index: int = 0  # 0 for the first assistant turn


@dataclass
class Feedback:
    """The environment's answer to a turn."""

    messages: list[ChatMessage] = field(default_factory=list)  # observations after the tool results (may be empty)
    reward: float | None = None  # per-turn reward, stored with the episode
    done: bool = False


class Environment(Protocol):
    """One episode's environment. Built per episode, so it may keep state across turns."""

    def reset(self, task: Task) -> list[ChatMessage]:
        """The episode's first messages (system and user) for this task."""

    def tools(self) -> Sequence[Tool]:
        """The tools the model may call in this episode (may be empty)."""

    def step(self, turn: Turn) -> Feedback:
        """Answer one assistant turn: further observations, a per-turn reward, whether the episode is done."""

    def final_reward(self) -> Reward:
        """The episode's reward (value and reason), asked once when it ends."""


EnvironmentFactory = Callable[..., Environment]  # factory(**args) -> a fresh Environment for one episode
