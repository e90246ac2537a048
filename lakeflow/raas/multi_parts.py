"""The pieces multi-role workflows build episodes from (`multi.py`, `multi_code.py`, a user's own).

A role's side of an episode as tokens (`Turns`: sampled turns with loss_mask 1, inserted feedback
and chat-template glue with loss_mask 0, logprob 0.0), the engine that plays a role (its own, else
the "policy" engine: self-play), generation within the model's length, and the follow-up turn that
adds another role's text to a conversation without re-tokenising what was sampled.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lakeflow.errors import ConfigError
from lakeflow.raas.engines import ChatMessage, Completion, Engine
from lakeflow.raas.outcome import Reward
from lakeflow.raas.trajectory import POLICY, Sampling, Trajectory

SOLVER, VERIFIER, SELECTOR, TESTGEN = "solver", "verifier", "selector", "testgen"


@dataclass
class Turns:
    """One role's side of an episode as tokens: its first prompt, then every later token with its mask."""

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    finish_reason: str = "error"  # of the last sampled turn; 'error' while none was

    def sampled(self, c: Completion) -> None:
        self.response_ids += c.token_ids
        self.logprobs += c.logprobs
        self.mask += [1] * len(c.token_ids)
        self.finish_reason = c.finish_reason

    def inserted(self, ids: list[int]) -> None:
        self.response_ids += ids
        self.logprobs += [0.0] * len(ids)
        self.mask += [0] * len(ids)

    def context(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    def trajectory(self, role: str, episode_id: str, r: Reward, sampling: Sampling, **extra: Any) -> Trajectory:
        """With `Sampling.truncated_reward` set, a last turn cut off by max_tokens gets that reward."""
        if self.finish_reason == "length" and sampling.truncated_reward is not None:
            r = Reward(sampling.truncated_reward, "truncated")
        info = {"reward_reason": r.reason, "temperature": sampling.temperature, **extra}
        if r.extracted:
            info["extracted"] = r.extracted
        ids, logprobs, mask = self.response_ids, self.logprobs, self.mask
        return Trajectory(role, episode_id, self.prompt_ids, ids, logprobs, mask, r.value, self.finish_reason, info)


def add_retry(
    turns: Turns,
    glue: list[int],
    again: Completion | str | None,
    first: Reward,
    extra: dict[str, Any],
    score: Callable[[Completion], Reward],
) -> Reward:
    """Append a retry (glue masked, then the second answer) to `turns`; the final answer's reward.
    A retry that could not run is recorded in `extra` and the first answer's reward stands."""
    if isinstance(again, Completion):
        turns.inserted(glue)
        turns.sampled(again)
        return score(again)
    if again is not None:
        extra["retry_error"] = again
    return first


def one_turn(prompt_ids: list[int], out: Completion | str) -> Turns:
    """A role's turns after one answer (none when `out` is why it could not answer)."""
    turns = Turns(prompt_ids)
    if isinstance(out, Completion):
        turns.sampled(out)
    return turns


def role_engine(engines: Mapping[str, Engine], role: str) -> Engine:
    """The engine that plays `role`: its own, else the policy's (self-play)."""
    engine = engines.get(role, engines.get(POLICY))
    if engine is None:
        raise ConfigError(f"no engine for role {role!r} (nor {POLICY!r}); the workflow got roles {sorted(engines)}")
    return engine


def generate(engine: Engine, prompts: Sequence[list[int]], n: int, sampling: Sampling) -> list[list[Completion] | str]:
    """`n` completions of each prompt, or why there are none (the prompt leaves no room under
    max_model_len). One engine call per distinct token budget: one call unless some prompt is near the limit."""
    out: list[list[Completion] | str] = [""] * len(prompts)
    budgets: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        room = engine.max_model_len - len(p)
        if room < 1:
            out[i] = f"prompt of {len(p)} tokens leaves no room under {engine.max_model_len}"
        else:
            budgets.setdefault(min(sampling.max_tokens, room), []).append(i)
    for max_tokens, indices in budgets.items():
        results = engine.generate([prompts[i] for i in indices], n, max_tokens, sampling.temperature)
        for i, completions in zip(indices, results, strict=True):
            out[i] = completions
    return out


def each(out: list[list[Completion] | str], n: int) -> list[Completion | str]:
    """The completions of one prompt, one per episode, or its reason in every episode."""
    (samples,) = out
    return [samples] * n if isinstance(samples, str) else list(samples)


def first_of_each(outs: list[list[Completion] | str]) -> list[Completion | str]:
    """The first completion of each prompt, or why it has none."""
    return [o if isinstance(o, str) else o[0] for o in outs]


def follow_up(engine: Engine, messages: Sequence[ChatMessage], sampled: list[int], text: str) -> list[int]:
    """Tokens that close the role's sampled turn and add `text` as a user turn, up to the next
    generation prompt: the chat template's own tokens, found by rendering an empty assistant turn.
    The sampled turn stays as sampled (never re-tokenised from its text), so the trajectory is
    exactly the context of the next turn."""
    opened = engine.encode_chat(messages)
    answered = [*messages, {"role": "assistant", "content": ""}]
    closed = engine.encode_chat(answered, add_generation_prompt=False)
    followed = engine.encode_chat([*answered, {"role": "user", "content": text}])
    close = closed[len(opened) :] if closed[: len(opened)] == opened else []
    if close and sampled and sampled[-1] == close[0]:
        close = close[1:]  # the turn ended with the template's end-of-turn token (not so when cut off)
    if followed[: len(closed)] == closed:
        return close + followed[len(closed) :]
    return close + engine.encode_chat([{"role": "user", "content": text}])


def full_pass(r: Reward) -> bool:
    """Whether a reward is a full pass."""
    return r.value >= 1.0


def problem_text(messages: Sequence[ChatMessage]) -> str:
    """The task as text another role reads: its user turns."""
    return "\n\n".join(m["content"] for m in messages if m["role"] == "user")


def user_turn(text: str) -> list[ChatMessage]:
    """A one-message chat: `text` as the user's turn."""
    return [{"role": "user", "content": text}]


def pairs(items: list[str]) -> list[tuple[str, str]]:
    """Consecutive items two by two: [a, b, c, d] -> [(a, b), (c, d)]."""
    return list(zip(items[::2], items[1::2], strict=True))


def new_id() -> str:
    """A fresh episode id."""
    return uuid.uuid4().hex
