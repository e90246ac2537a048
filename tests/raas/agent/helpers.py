"""Small environments and a scripted engine for the agent runner's tests.

The tiny model is randomly initialised and never writes a tool call, so the tests of parsing, tools
and limits drive the runner with `Scripted`, an engine whose replies are chosen by a function of the
context, tokenised by the tiny model's real tokenizer and chat template. The tests of token-in,
token-out use the real engines with `Chatter`, whose observations need no tool call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lakeflow.lake.tasks import Task
from lakeflow.raas.agent.env import ChatMessage, Feedback, Tool, Turn
from lakeflow.raas.engines import Completion, Prompt, chat_token_ids, decode_text
from lakeflow.raas.outcome import Reward

LOGPROB = -0.25  # of every scripted token, so a 0.0 can only come from a masked token


def make_task(n: int = 2, prompt: str = "What is 3 + 4?", answer: str = "7", task_id: str = "t") -> Task:
    return Task(
        task_id=task_id,
        model_id="policy",
        prompt_id="p",
        prompt=prompt,
        answer=answer,
        n_samples=n,
        task_type="agent",
        issued_at="2025-01-01T00:00:00Z",  # type: ignore[arg-type]
    )


class Scripted:
    """An engine whose reply to a context is `reply(decoded context)`, tokenised by a real tokenizer: a
    reply that fits max_tokens ends with the stop token ('stop'), a longer one is cut ('length')."""

    def __init__(self, tokenizer: Any, reply: Callable[[str], str], max_model_len: int = 8192) -> None:
        self.tokenizer, self.reply, self.max_model_len = tokenizer, reply, max_model_len
        self.calls: list[int] = []  # batch size of every generate call
        self.contexts: list[list[int]] = []  # every prompt it was given, as token ids

    def load(self, model_dir: str) -> None:
        raise AssertionError("no weights should be loaded")

    def encode_chat(
        self,
        messages: Sequence[ChatMessage],
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[int]:
        return chat_token_ids(self.tokenizer, messages, add_generation_prompt, tools)  # type: ignore[arg-type]

    def decode(self, token_ids: Sequence[int]) -> str:
        return decode_text(self.tokenizer, token_ids)

    def generate(
        self, prompts: Sequence[Prompt], n: int, max_tokens: int, temperature: float
    ) -> list[list[Completion]]:
        self.calls.append(len(prompts))
        out = []
        for p in prompts:
            ids = [int(t) for t in p]  # type: ignore[union-attr]
            self.contexts.append(ids)
            assert len(ids) + max_tokens <= self.max_model_len
            row = []
            for _ in range(n):
                text = self.reply(str(self.tokenizer.decode(ids)))
                new = self.tokenizer.encode(text, add_special_tokens=False)
                if len(new) < max_tokens:
                    new, reason = [*new, self.tokenizer.eos_token_id], "stop"
                else:
                    new, reason = new[:max_tokens], "length"
                row.append(Completion(ids, new, [LOGPROB] * len(new), reason, self.decode(new)))  # type: ignore[arg-type]
            out.append(row)
        return out


def call(name: str, **arguments: Any) -> str:
    import json

    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


class Calculator:
    """Tools `add(a, b)` and `slow()` (sleeps `slow_s`); done when a turn has no tool call, reward 1 when
    that turn says the task's answer. A per-turn reward of 0.1 for every turn with a call."""

    def __init__(self, slow_s: float = 0.0) -> None:
        self.slow_s = slow_s
        self.answer = ""
        self.said = ""
        self.turns: list[Turn] = []

    def reset(self, task: Task) -> list[ChatMessage]:
        self.answer = task.answer
        return [{"role": "user", "content": task.prompt}]

    def tools(self) -> list[Tool]:
        add = Tool(
            "add",
            "Add two integers.",
            {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
                "additionalProperties": False,
            },
            lambda a, b: str(a + b),
        )
        slow = Tool("slow", "Takes its time.", {"type": "object", "properties": {}}, self._slow)
        return [add, slow]

    def _slow(self) -> str:
        time.sleep(self.slow_s)
        return "slept"

    def step(self, turn: Turn) -> Feedback:
        self.turns.append(turn)
        if turn.results or turn.malformed_calls:
            return Feedback(reward=0.1)
        self.said = turn.text
        return Feedback(done=True)

    def final_reward(self) -> Reward:
        return Reward(1.0, "correct") if self.answer and self.answer in self.said else Reward(0.0, "wrong")


class Chatter:
    """No tools: every turn is answered by a tool-role message and a user nudge, for `turns` turns;
    reward 0.5. Multi-turn episodes from any model, however random."""

    def __init__(self, turns: int = 3) -> None:
        self.turns, self.seen = turns, 0

    def reset(self, task: Task) -> list[ChatMessage]:
        return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": task.prompt}]

    def tools(self) -> list[Tool]:
        return []

    def step(self, turn: Turn) -> Feedback:
        self.seen += 1
        if self.seen >= self.turns:
            return Feedback(done=True, reward=1.0)
        messages = [{"role": "tool", "content": f"result {self.seen}"}, {"role": "user", "content": "Go on."}]
        return Feedback(messages=messages, reward=0.0)

    def final_reward(self) -> Reward:
        return Reward(0.5, "played")


def play_across_versions(
    engine: Any, v1_dir: str, sampling: Any, chunk_tokens: int, switch_after: int = 2
) -> list[Any]:
    """A group of three `Chatter` episodes on `engine` (holding version 0) whose turns are sampled in chunks
    of `chunk_tokens`; after `switch_after` rounds the engine loads `v1_dir` as version 1, between two
    rounds, as a rollout service with `weights_update: interrupt` does. Returns the group's trajectories."""
    from lakeflow.raas.config.environment import EnvironmentConfig
    from lakeflow.raas.episodes.workflow import agent_scheduler

    version = [0]
    config = EnvironmentConfig(name="tests.raas.agent.helpers:Chatter", args={"turns": 3})
    scheduler = agent_scheduler(engine, config, sampling, lambda: version[0], chunk_tokens)
    try:
        scheduler.add("g", make_task(3))
        finished, rounds = [], 0
        while not finished:
            finished += scheduler.advance()
            rounds += 1
            if rounds == switch_after:
                engine.load(v1_dir)
                version[0] = 1
    finally:
        scheduler.close()
    return finished[0].trajectories


def switched_mid_turn(t: Any) -> bool:
    """Whether a version took over in the middle of a turn: a run starts right after a sampled token."""
    return any(start > 0 and t.loss_mask[start - 1] == 1 for start, _ in t.extra["token_versions"][1:])


def check_trainer_reproduces(
    model_dir: str | Mapping[int, str], trajectories: Sequence[Any], temperature: float, observations: bool = True
) -> float:
    """The trainer's forward over each stored context reproduces the engine's logprob of every sampled
    token (fp32); every token the model did not sample has loss_mask 0 and logprob 0.0 (`observations`:
    each trajectory must have some). `model_dir` may map weights versions to directories: each token is
    then scored by the version its sample's `extra.token_versions` says sampled it. Returns the largest
    absolute difference."""
    import torch
    from transformers import AutoModelForCausalLM

    from lakeflow.trainer.model import token_logprobs

    dirs = dict(model_dir) if isinstance(model_dir, Mapping) else {-1: model_dir}
    models = {v: AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval() for v, d in dirs.items()}
    worst = 0.0
    for t in trajectories:
        ids = torch.tensor([t.prompt_ids + t.response_ids])
        mask = torch.tensor(t.loss_mask, dtype=torch.bool)
        stored = torch.tensor(t.response_logprobs)
        assert mask.any() and ((~mask).any() or not observations)  # sampled turns (and observations) present
        assert (stored[~mask] == 0.0).all()
        owner = torch.tensor(token_owners(t.extra, len(t.response_ids)) if -1 not in dirs else [-1] * len(mask))
        assert set(owner[mask].tolist()) <= set(models), "a token was sampled by a version not given"
        for version, model in models.items():
            scored = mask & (owner == version)
            if scored.any():
                with torch.inference_mode():
                    lp = token_logprobs(model, ids, torch.ones_like(ids), temperature)[0, len(t.prompt_ids) :]
                worst = max(worst, float((lp[scored] - stored[scored]).abs().max()))
    return worst


def token_owners(extra: Mapping[str, Any], n: int) -> list[int]:
    """The weights version of each of a sample's `n` response positions, from its `token_versions` runs."""
    runs = extra["token_versions"]
    assert runs[0][0] == 0 and [r[0] for r in runs] == sorted(r[0] for r in runs)
    ends = [r[0] for r in runs[1:]] + [n]
    return [v for (start, v), end in zip(runs, ends, strict=True) for _ in range(end - start)]
