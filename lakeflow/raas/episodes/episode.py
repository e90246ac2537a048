"""One multi-turn episode as tokens: token-in, token-out.

The context of an episode is exactly the token ids the engine saw: the first prompt (the chat
template's rendering of the environment's first messages, with the tools), then for each turn the
sampled tokens as the engine returned them (their logprobs, loss_mask 1) and the tokens that close
the turn and add the observations up to the next generation prompt (loss_mask 0, logprob 0.0).
Those glue tokens are the chat template's own: the rendering of the conversation with the new
messages minus the rendering without them, checked to extend it as a prefix. Each observation is
tokenized once, when it is appended; nothing already in the context is tokenized again, and the
next turn is generated from the ids. A template that rewrites earlier turns (the prefix check fails)
ends the episode with the reason `template_rewrites_history`: such templates need
`per_turn_samples`, where each turn is its own sample whose prompt is the template's rendering of
the whole conversation so far.

A turn may be sampled in chunks (`weights_update: interrupt` with `interrupt_chunk_tokens`): each chunk
is appended to the turn in progress, and the next chunk is generated from the ids so far, perhaps on
newer weights. `token_versions` records, as runs, which weights version sampled which tokens.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lakeflow.raas.config.environment import EnvironmentConfig
from lakeflow.raas.agent.env import ChatMessage, Environment, Feedback, Tool, Turn
from lakeflow.raas.engines import Completion, Engine
from lakeflow.raas.outcome import Reward
from lakeflow.raas.trajectory import POLICY, Sampling, Trajectory

log = logging.getLogger(__name__)

# Why an episode ended (extra.end); finish_reason is 'stop' for the first two, 'length' for the limits.
DONE, NO_TOOL_CALL = "done", "no_tool_call"
MAX_TURNS, MAX_EPISODE_TOKENS, CONTEXT = "max_turns", "max_episode_tokens", "context"
TEMPLATE, ENV_ERROR = "template_rewrites_history", "environment_error"
_FINISH = {DONE: "stop", NO_TOOL_CALL: "stop", TEMPLATE: "error", ENV_ERROR: "error"}


def glue_tokens(
    engine: Engine,
    history: Sequence[ChatMessage],
    assistant_text: str,
    sampled: Sequence[int],
    new: Sequence[ChatMessage],
    tools: Sequence[Mapping[str, Any]] | None,
) -> list[int] | None:
    """The chat template's tokens after a sampled assistant turn: its end-of-turn (less a stop token the
    model sampled), the `new` messages and the next generation prompt. None when the template's
    rendering with them does not extend the rendering without them (it rewrites earlier turns)."""
    opened = engine.encode_chat(history, True, tools)
    answered = [*history, {"role": "assistant", "content": assistant_text}]
    closed = engine.encode_chat(answered, False, tools)
    followed = engine.encode_chat([*answered, *new], True, tools)
    empty = engine.encode_chat([*history, {"role": "assistant", "content": ""}], False, tools)
    if closed[: len(opened)] != opened or empty[: len(opened)] != opened or followed[: len(closed)] != closed:
        return None
    close = empty[len(opened) :]  # what the template puts after an assistant's content
    if close and sampled and sampled[-1] == close[0]:
        close = close[1:]  # the model sampled the end-of-turn token itself (not so when it was cut off)
    return close + followed[len(closed) :]


@dataclass
class Episode:
    """One episode in flight: the environment, the conversation as messages and as tokens, its counters."""

    env: Environment
    tools: Sequence[Tool]
    messages: list[ChatMessage]  # the conversation (assistant turns as decoded text), for the template
    prompt_ids: list[int]  # the first prompt; per_turn_samples: this turn's prompt
    limit: int  # most tokens of the context (prompt + everything after it)
    limit_reason: str  # MAX_EPISODE_TOKENS or CONTEXT
    response_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    turns: int = 0
    turn_finish: str = "stop"  # of the last sampled turn
    end: str | None = None  # why it ended; None while it runs
    tool_calls: Counter[str] = field(default_factory=Counter)
    tool_errors: int = 0
    malformed_calls: int = 0
    tool_seconds: float = 0.0
    turn_rewards: list[float | None] = field(default_factory=list)
    turn_ends: list[int] = field(default_factory=list)  # response offset after each turn's sampled tokens
    turn_obs: list[str] = field(default_factory=list)  # hash of the observation each turn answered
    turn_versions: list[int] = field(default_factory=list)  # version of each turn's first token (interrupt)
    token_versions: list[list[int]] = field(default_factory=list)  # [response offset, version] where each run starts
    partial_ids: list[int] = field(default_factory=list)  # the turn being sampled in chunks: its tokens so far
    partial_logprobs: list[float] = field(default_factory=list)
    done_turns: list[Trajectory] = field(default_factory=list)  # per_turn_samples: one per finished turn
    error: str = ""

    @property
    def schemas(self) -> list[dict[str, Any]] | None:
        return [t.schema() for t in self.tools] or None

    def context(self) -> list[int]:
        """The ids the next turn (or the next chunk of this one) is generated from."""
        return self.prompt_ids + self.response_ids + self.partial_ids

    def room(self, max_new_tokens: int) -> int:
        """Tokens the turn in progress may still sample (< 1: none)."""
        return min(max_new_tokens - len(self.partial_ids), self.limit - len(self.context()))

    def finish(self, end: str, error: str = "") -> None:
        self.end, self.error = end, error

    def add_chunk(self, c: Completion, version: int | None = None) -> None:
        """Append sampled tokens verbatim to the turn in progress, with (when given) the weights version that
        sampled them."""
        if version is not None:
            if not self.partial_ids:
                self.turn_versions.append(version)
            if not self.token_versions or self.token_versions[-1][1] != version:
                self.token_versions.append([len(self.response_ids) + len(self.partial_ids), version])
        self.partial_ids += c.token_ids
        self.partial_logprobs += c.logprobs

    def end_turn(self, text: str, finish_reason: str, cut_by_limit: bool) -> None:
        """Close the turn in progress (loss_mask 1 on its tokens, their logprobs), with where it ends, what it
        answered, its decoded `text` and why sampling stopped."""
        self.turn_obs.append(observation_hash(self.messages))
        self.response_ids += self.partial_ids
        self.turn_ends.append(len(self.response_ids))
        self.logprobs += self.partial_logprobs
        self.mask += [1] * len(self.partial_ids)
        self.partial_ids, self.partial_logprobs = [], []
        self.turns += 1
        self.turn_finish = finish_reason
        self.messages.append({"role": "assistant", "content": text})
        if cut_by_limit:
            self.finish(self.limit_reason)

    def observe(
        self,
        engine: Engine,
        turn: Turn,
        malformed: Sequence[str],
        feedback: Feedback,
        config: EnvironmentConfig,
        sampling: Sampling,
    ) -> None:
        """Record a turn's tool results (and the errors of its `malformed` calls) and the environment's
        answer; append them as observations (loss_mask 0), or end the episode."""
        self.turn_rewards.append(feedback.reward)
        for r in turn.results:
            self.tool_calls[r.call.name] += 1
            self.tool_errors += r.error is not None
            self.tool_seconds += r.seconds
        self.malformed_calls += turn.malformed_calls
        new = tool_messages(turn, malformed) + list(feedback.messages)
        if config.per_turn_samples:
            self.done_turns.append(self._turn_sample(sampling))
        if self.end is not None:
            return
        if feedback.done:
            return self.finish(DONE)
        if not new:
            return self.finish(NO_TOOL_CALL)
        if self.turns >= config.max_turns:
            return self.finish(MAX_TURNS)
        history, text, sampled = self.messages[:-1], turn.text, self.response_ids
        self.messages.extend(new)
        if config.per_turn_samples:
            prompt = engine.encode_chat(self.messages, True, self.schemas)
            if len(prompt) >= self.limit:
                return self.finish(self.limit_reason)
            self.prompt_ids, self.response_ids, self.logprobs, self.mask = prompt, [], [], []
            self.token_versions = []  # the next turn's runs start over with its response
            return None
        glue = glue_tokens(engine, history, text, sampled, new, self.schemas)
        if glue is None:
            return self.finish(TEMPLATE, "the chat template rewrites earlier turns: set environment.per_turn_samples")
        if len(self.context()) + len(glue) >= self.limit:
            return self.finish(self.limit_reason)
        self.response_ids += glue
        self.logprobs += [0.0] * len(glue)
        self.mask += [0] * len(glue)
        return None

    def _turn_sample(self, sampling: Sampling) -> Trajectory:
        info: dict[str, Any] = {"turn": self.turns - 1, "temperature": sampling.temperature}
        if self.token_versions:
            info["token_versions"] = [list(run) for run in self.token_versions]
        ids, lps, mask = list(self.response_ids), list(self.logprobs), list(self.mask)
        return Trajectory(POLICY, "", list(self.prompt_ids), ids, lps, mask, 0.0, self.turn_finish, info)

    def finish_reason(self) -> str:
        return _FINISH.get(self.end or DONE, "length")

    def info(self) -> dict[str, Any]:
        """The episode's structure, stored in the sample's `extra` (documented in docs/agent-episodes.md)."""
        info: dict[str, Any] = {
            "turns": self.turns,
            "tool_calls": dict(sorted(self.tool_calls.items())),
            "tool_errors": self.tool_errors,
            "malformed_calls": self.malformed_calls,
            "tool_seconds": round(self.tool_seconds, 6),
            "turn_rewards": self.turn_rewards,
            "turn_ends": self.turn_ends,
            "turn_obs": self.turn_obs,
            "end": self.end,
        }
        if self.turn_versions:
            info["turn_versions"] = self.turn_versions
            info["token_versions"] = self.token_versions
        if self.error:
            info["error"] = self.error
        return info

    def trajectories(self, episode_id: str, reward: Reward, sampling: Sampling, per_turn: bool) -> list[Trajectory]:
        """The episode's samples: one (the whole context), or one per turn with the final reward. Per-turn
        samples carry `extra.segment` (the turn: 0 starts the episode, the rest continue it) and
        `extra.segments` (how many): the dataflow counts a group by the samples that start an episode.
        A single sample has no segment keys."""
        extra = {"reward_reason": reward.reason, "temperature": sampling.temperature, **self.info()}
        if reward.extracted:
            extra["extracted"] = reward.extracted
        finish = self.finish_reason()
        if not per_turn or not self.done_turns:  # (an episode that never sampled is one empty sample)
            ids, lps, mask = self.response_ids, self.logprobs, self.mask
            return [Trajectory(POLICY, episode_id, self.prompt_ids, ids, lps, mask, reward.value, finish, extra)]
        out = []
        for i, t in enumerate(self.done_turns):
            last = i == len(self.done_turns) - 1
            turn_extra = {**extra, "turn": i, "segment": i, "segments": len(self.done_turns)}
            if "token_versions" in t.extra:  # the runs of its own turn
                turn_extra["token_versions"] = t.extra["token_versions"]
            out.append(
                Trajectory(
                    POLICY,
                    episode_id,
                    t.prompt_ids,
                    t.response_ids,
                    t.response_logprobs,
                    t.loss_mask,
                    reward.value,
                    finish if last else t.finish_reason,
                    turn_extra,
                )
            )
        return out


def tool_messages(turn: Turn, malformed: Sequence[str]) -> list[ChatMessage]:
    """The messages the model reads back: one `tool` message per call (its answer or error), then one
    per call that could not be parsed, saying why."""
    out: list[ChatMessage] = [{"role": "tool", "name": r.call.name, "content": r.content} for r in turn.results]
    out += [{"role": "tool", "name": "invalid", "content": f"error: malformed tool call: {e}"} for e in malformed]
    return out


def observation_hash(messages: Sequence[ChatMessage]) -> str:
    """16 hex digits of SHA-256 over the messages since the last assistant turn (all of them before the
    first): what the next turn answers. Equal hashes within a group mark the same observation, the anchor
    states of step-level credit (GiGPO)."""
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    text = json.dumps(list(messages[last + 1 :]), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
