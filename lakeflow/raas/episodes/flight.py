"""The groups of episodes in flight in one runner: admission and the groups that ended.

Every episode runner (environments, gateway agents) admits a task's `n_samples` episodes as one group while
the live episodes leave room for it, refuses a key already in flight, and hands a group on once every one
of its episodes has ended (`end` set).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from lakeflow.lake.tasks import Task


class _Ends(Protocol):
    end: Any  # None while the episode runs


E = TypeVar("E", bound=_Ends)


@dataclass
class FlightGroup(Generic[E]):
    """One task's episodes, from admission to their end."""

    key: str
    task: Task
    episodes: list[E]
    started: float = field(default_factory=time.monotonic)

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started


class Flight(Generic[E]):
    """The groups in flight, at most `capacity` live episodes (a first group always fits)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.groups: dict[str, FlightGroup[E]] = {}

    @property
    def live(self) -> int:
        """Episodes that have not ended."""
        return sum(e.end is None for g in self.groups.values() for e in g.episodes)

    def can_admit(self, n: int) -> bool:
        """Whether a group of `n` episodes fits (always, when nothing is in flight)."""
        live = self.live
        return live == 0 or live + n <= self.capacity

    def open(self, key: str, task: Task, episodes: list[E]) -> FlightGroup[E]:
        if key in self.groups:
            raise ValueError(f"group {key!r} is already in flight")
        group = FlightGroup(key, task, episodes)
        self.groups[key] = group
        return group

    def ended(self) -> list[FlightGroup[E]]:
        """The groups whose every episode has ended, removed from the flight."""
        out = [g for g in self.groups.values() if all(e.end is not None for e in g.episodes)]
        for g in out:
            del self.groups[g.key]
        return out

    def clear(self) -> list[FlightGroup[E]]:
        """Every group still in flight, removed (the runner is closing)."""
        out, self.groups = list(self.groups.values()), {}
        return out
