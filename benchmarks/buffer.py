"""The baseline for `python -m benchmarks dataflow`: an in-memory rollout buffer the way peer systems
keep one inside their trainer or data service.

A heap orders fresh groups (oldest policy version first, then arrival), a bounded deque
keeps served groups for replay, and every sample's token ids and logprobs stay in memory
as arrays. Serving semantics match lakeflow's: staleness on fresh and replay, replay drawn
first, fresh fills the rest, a fresh group is served once. Nothing survives a crash.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from dataclasses import dataclass

import numpy as np


@dataclass
class Group:
    group_id: int
    version: int
    rewards: np.ndarray  # float32 (n,)
    tokens: list[np.ndarray]  # per sample: int32 prompt + response ids
    logprobs: list[np.ndarray]  # per sample: float32 (response,)


class InMemoryBuffer:
    """Fresh heap + bounded replay deque, payload in memory."""

    def __init__(self, replay_capacity: int, max_staleness: int, seed: int = 0) -> None:
        self.fresh: list[tuple[int, int, Group]] = []
        self.replay: deque[Group] = deque(maxlen=replay_capacity)
        self.max_staleness = max_staleness
        self.rng = random.Random(seed)
        self._arrival = 0

    def add(self, group: Group) -> None:
        heapq.heappush(self.fresh, (group.version, self._arrival, group))
        self._arrival += 1

    def batch(self, step: int, groups: int, replay_ratio: float) -> list[Group] | None:
        ok = [g for g in self.replay if step - g.version <= self.max_staleness]
        replay = self.rng.sample(ok, min(len(ok), int(groups * replay_ratio)))
        fresh: list[Group] = []
        while self.fresh and len(fresh) < groups - len(replay):
            _, _, g = heapq.heappop(self.fresh)
            if step - g.version <= self.max_staleness:
                fresh.append(g)
        if len(fresh) < groups - len(replay):
            for g in fresh:
                self.add(g)
            return None
        self.replay.extend(fresh)
        return fresh + replay
