"""What a rollout service's loop asks of a group runner (`runners.py` builds them): a finished `Group`, the
`GroupRunner` protocol."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from lakeflow.lake.tasks import Task
from lakeflow.raas.trajectory import Trajectory


@dataclass(frozen=True)
class Group:
    """A finished group: the task id it was admitted under, its trajectories, the seconds it took; or a
    group the runner gave up (`dropped`: why), which is never written and whose task is reissued."""

    key: str
    trajectories: list[Trajectory]
    seconds: float
    dropped: str = ""
    failures: dict[str, int] = field(default_factory=dict)  # its failed episodes by end (the service counts them)


class Admitted:
    """The tasks admitted since the last `advance`, at most `room` of them: the admission half of the runners
    that generate what was admitted in one engine call (`BatchRunner`, `ScoredRunner`)."""

    def __init__(self, room: int) -> None:
        self.room = room
        self._queued: list[tuple[str, Task]] = []

    def can_admit(self, n_samples: int) -> bool:
        return len(self._queued) < self.room

    def add(self, key: str, task: Task) -> None:
        self._queued.append((key, task))

    def take(self) -> list[tuple[str, Task]]:
        """The admitted tasks (key, task), emptying the queue."""
        queued, self._queued = self._queued, []
        return queued


class GroupRunner(Protocol):
    def can_admit(self, n_samples: int) -> bool:
        """Room for one more group of `n_samples` episodes (always, when nothing is in flight)."""
        ...

    def add(self, key: str, task: Task) -> None:
        """Start the group of `task`, returned by a later `advance` under `key`."""
        ...

    def advance(self, wait_s: float) -> list[Group]:
        """Work on the groups in flight (waiting at most `wait_s` for outside work); the ones that ended."""
        ...

    def close(self) -> None:
        """Release what the runner holds (threads, environments); groups in flight are dropped."""
        ...
