"""One round of turns on the engine: the sampling step every multi-turn episode shares.

Environment episodes and gateway requests both hand their next turns to `RoundSampler.sample` as `Turn`s:
the ids a turn is generated from and its token budget. The turns of a round are generated together, one
engine call per distinct budget (one call unless some are near their limit). With `chunk_tokens`
(`weights_update: interrupt` with `interrupt_chunk_tokens`) a round samples at most that many tokens of a
turn; a turn with budget left is carried to the next round and goes on from its ids, so weights loaded
between two rounds take over mid-turn at a token boundary. Each chunk is stamped with the weights version
that sampled it (`runs`), when the service follows versions that change between rounds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lakeflow.raas.engines import Engine, FinishReason


@dataclass
class Turn:
    """One turn being sampled: generated from `context`, at most `budget` tokens, for `owner` (an episode or
    a request); `sampled`, `logprobs` and `runs` grow by chunk, `text` and `finish` are set when it ends."""

    context: list[int]
    budget: int
    owner: Any
    sampled: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    runs: list[list[int]] = field(default_factory=list)  # [offset in the turn, version] where each version began
    text: str = ""
    finish: FinishReason = "stop"


class RoundSampler:
    """Samples rounds of turns on one engine (see the module docstring)."""

    def __init__(
        self,
        engine: Engine,
        temperature: float,
        chunk_tokens: int | None = None,
        version: Callable[[], int | None] | None = None,
    ) -> None:
        """`version`: the engine's weights version, read once per round; None stamps nothing."""
        self.engine, self.temperature, self.chunk_tokens, self.version = engine, temperature, chunk_tokens, version

    def sample(self, turns: list[Turn]) -> tuple[list[Turn], list[Turn]]:
        """Generate one round of `turns`: (the turns that ended, the turns carried to the next round)."""
        budgets: dict[int, list[Turn]] = {}
        for t in turns:
            left = t.budget - len(t.sampled)
            budgets.setdefault(min(left, self.chunk_tokens or left), []).append(t)
        version = self.version() if self.version is not None and budgets else None  # weights change between rounds
        ended: list[Turn] = []
        carried: list[Turn] = []
        for max_tokens, batch in budgets.items():
            results = self.engine.generate([t.context + t.sampled for t in batch], 1, max_tokens, self.temperature)
            for t, (c, *_) in zip(batch, results, strict=True):
                whole = not t.sampled  # the turn is this one chunk so far
                if version is not None and (not t.runs or t.runs[-1][1] != version):
                    t.runs.append([len(t.sampled), version])
                t.sampled += c.token_ids
                t.logprobs += c.logprobs
                if c.finish_reason == "length" and len(t.sampled) < t.budget:
                    carried.append(t)  # a chunk ended, not the turn
                    continue
                t.text = c.text if whole else self.engine.decode(t.sampled)
                t.finish = c.finish_reason
                ended.append(t)
        return ended, carried


def add_runs(
    token_versions: list[list[int]], turn_versions: list[int], start: int, runs: list[list[int]], n: int
) -> None:
    """Record a turn's version runs on its episode: `start` is where the turn's tokens begin in the response,
    `n` how many of them were kept (a stop string may cut a turn). `turn_versions` gains the version of the
    turn's first token, `token_versions` a [response offset, version] where each new version begins."""
    kept = [(offset, v) for offset, v in runs if offset < n]
    if kept:
        turn_versions.append(kept[0][1])
    for offset, v in kept:
        if not token_versions or token_versions[-1][1] != v:
            token_versions.append([start + offset, v])
