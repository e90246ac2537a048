"""The scored runner: rlvr groups generated in one engine call, then scored by a model (`Scorer`).

A `Scorer` takes generated groups and gives back finished ones, perhaps later: the judge holds a group
until every sample has its verdict (`judge/judge_scorer.py`), the reward model scores a batch at once
(`reward_model/model_scorer.py`). A group the scorer gives up is handed back `dropped` (never written; its
task is reissued), never scored 0. Groups the scorer holds count against its `limit`, so a scorer that is
down stops generation instead of piling up unscored groups.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from lakeflow.raas.engines import Engine
from lakeflow.raas.groups import Admitted, Group
from lakeflow.raas.scoring.generated import Generated, generate_admitted
from lakeflow.raas.trajectory import Sampling


class Scorer(Protocol):
    limit: int  # most groups it may hold (generated, not yet handed back) before generation waits

    def submit(self, groups: list[Generated]) -> None:
        """Start scoring generated groups."""
        ...

    def collect(self, wait_s: float, stopping: bool) -> list[Group]:
        """The groups scored (or given up) since the last call, waiting at most `wait_s` for one; `stopping`:
        the service is stopping (one last try for what is held)."""
        ...

    def held(self) -> int:
        """Groups submitted and not yet handed back."""
        ...

    def close(self) -> None: ...


class ScoredRunner(Admitted):
    """Generates the admitted rlvr groups in one engine call, has `scorer` score them (module docstring)."""

    def __init__(
        self,
        engine: Engine,
        scorer: Scorer,
        sampling: Sampling,
        batch_groups: int,
        stopping: Callable[[], bool] = lambda: False,
    ) -> None:
        super().__init__(batch_groups)
        self.engine, self.scorer, self.sampling, self.stopping = engine, scorer, sampling, stopping

    def can_admit(self, n_samples: int) -> bool:
        queued = len(self._queued)
        return queued < self.room and queued + self.scorer.held() < max(self.room, self.scorer.limit)

    def advance(self, wait_s: float) -> list[Group]:
        done: list[Group] = []
        queued = self.take()
        if queued:
            done, generated = generate_admitted(queued, self.engine, self.sampling)
            self.scorer.submit(generated)
        return done + self.scorer.collect(0.0 if done else wait_s, self.stopping())

    def close(self) -> None:
        self.scorer.close()
        self.take()
