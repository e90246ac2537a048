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

A turn may be sampled in chunks (`rounds.py`); once it ends, its tokens are appended as sampled and
`token_versions` records, as runs, which weights version sampled which of them.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lakeflow.raas.agent.env import ChatMessage, Environment, Feedback, Tool, Turn
from lakeflow.raas.config.environment import EnvironmentConfig
from lakeflow.raas.engines import Engine
from lakeflow.raas.episodes import rounds
from lakeflow.raas.episodes.ends import EpisodeEnd, finish_reason
from lakeflow.raas.episodes.record import episode_extra, version_extra
from lakeflow.raas.outcome import Reward
from lakeflow.raas.trajectory import POLICY, Sampling, Trajectory

log = logging.getLogger(__name__)


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
    limit_reason: EpisodeEnd  # MAX_EPISODE_TOKENS or CONTEXT
    response_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    turns: int = 0
    turn_finish: str = "stop"  # of the last sampled turn
    end: EpisodeEnd | None = None  # why it ended; None while it runs
    tool_calls: Counter[str] = field(default_factory=Counter)
    tool_errors: int = 0
    malformed_calls: int = 0
    tool_seconds: float = 0.0
    turn_rewards: list[float | None] = field(default_factory=list)
    turn_ends: list[int] = field(default_factory=list)  # response offset after each turn's sampled tokens
    turn_obs: list[str] = field(default_factory=list)  # hash of the observation each turn answered
    turn_versions: list[int] = field(default_factory=list)  # version of each turn's first token (interrupt)
    token_versions: list[list[int]] = field(default_factory=list)  # [response offset, version] where each run starts
    done_turns: list[Trajectory] = field(default_factory=list)  # per_turn_samples: one per finished turn
    error: str = ""

    @property
    def schemas(self) -> list[dict[str, Any]] | None:
        return [t.schema() for t in self.tools] or None

    def context(self) -> list[int]:
        """The ids the next turn is generated from."""
        return self.prompt_ids + self.response_ids

    def next_turn(self, max_new_tokens: int) -> rounds.Turn | None:
        """The next turn to sample, or None (the episode ended at its limit) when no token fits."""
        budget = min(max_new_tokens, self.limit - len(self.context()))
        if budget < 1:
            self.finish(self.limit_reason)
            return None
        return rounds.Turn(self.context(), budget, self)

    def finish(self, end: EpisodeEnd, error: str = "") -> None:
        self.end, self.error = end, error

    def end_turn(self, turn: rounds.Turn, max_new_tokens: int) -> None:
        """Append a sampled turn verbatim (loss_mask 1, its logprobs and version runs) with what it answered;
        a turn cut by the episode's limit (not by max_new_tokens) ends the episode."""
        self.turn_obs.append(observation_hash(self.messages))
        rounds.add_runs(self.token_versions, self.turn_versions, len(self.response_ids), turn.runs, len(turn.sampled))
        self.response_ids += turn.sampled
        self.turn_ends.append(len(self.response_ids))
        self.logprobs += turn.logprobs
        self.mask += [1] * len(turn.sampled)
        self.turns += 1
        self.turn_finish = turn.finish
        self.messages.append({"role": "assistant", "content": turn.text})
        if turn.finish == "length" and len(turn.sampled) < max_new_tokens:
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
            return self.finish(EpisodeEnd.DONE)
        if not new:
            return self.finish(EpisodeEnd.NO_TOOL_CALL)
        if self.turns >= config.max_turns:
            return self.finish(EpisodeEnd.MAX_TURNS)
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
            why = "the chat template rewrites earlier turns: set environment.per_turn_samples"
            return self.finish(EpisodeEnd.TEMPLATE, why)
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
        return finish_reason(self.end)

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
        }
        return info | version_extra(self.turn_versions, self.token_versions)

    def trajectories(self, episode_id: str, reward: Reward, sampling: Sampling, per_turn: bool) -> list[Trajectory]:
        """The episode's samples: one (the whole context), or one per turn with the final reward. Per-turn
        samples carry `extra.segment` (the turn: 0 starts the episode, the rest continue it) and
        `extra.segments` (how many): the dataflow counts a group by the samples that start an episode.
        A single sample has no segment keys."""
        extra = episode_extra(reward, sampling.temperature, self.end, self.error) | self.info()
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
