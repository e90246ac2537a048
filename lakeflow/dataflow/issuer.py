"""Pre-rollout: keep enough tasks outstanding, reissue expired claims, release finished tasks.

Backpressure: a model gets new tasks only while outstanding tasks plus buffered groups
(fresh and incomplete) are below `groups_per_step * (steps_ahead + 1) * buffer_factor`,
so production follows consumption. The curation policy picks which prompts to submit;
GRESO's exploration probabilities are adapted here, once per trainer version.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from lakeflow.catalog.policy import load_policy
from lakeflow.catalog.state import Catalog
from lakeflow.dataflow.config import DataflowConfig, ModelConfig
from lakeflow.errors import LakeflowError
from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.lake import tasks as lake_tasks

log = logging.getLogger("lakeflow.dataflow")


@dataclass
class GresoState:
    """Adapted exploration probabilities and the skip counts since the last adaptation."""

    p_easy: float
    p_hard: float
    version: int = -1
    seen: dict[str, int] = field(default_factory=lambda: {"easy": 0, "hard": 0})
    skipped: dict[str, int] = field(default_factory=lambda: {"easy": 0, "hard": 0})


class TaskIssuer:
    """Owns the `tasks/` prefix of every model."""

    def __init__(self, store: Store, catalog: Catalog, config: DataflowConfig) -> None:
        self.store = store
        self.catalog = catalog
        self.config = config
        self.greso = {m.id: GresoState(m.greso.p_easy, m.greso.p_hard) for m in config.models}
        self.round = 0
        self._last_claim_check = datetime.min.replace(tzinfo=UTC)

    def sync(self, model: ModelConfig, now: datetime) -> int:
        """Rebuild the model's outstanding tasks from the bucket; reissue expired claims.
        Returns how many claims were reissued."""
        open_ids, claimed = lake_tasks.list_tasks(self.store, model.id)
        known = self.catalog.tasks.outstanding(model.id)
        rows = []
        for task_id in sorted(open_ids):
            if task_id in known:
                rows.append(known[task_id])
                continue
            try:
                task = lake_tasks.read_task(self.store, model.id, task_id)
            except FileNotFoundError:
                continue
            except LakeflowError:
                lake_tasks.release_task(self.store, model.id, task_id)  # corrupt: drop it, the prompt is reissued
                continue
            rows.append((task.task_id, task.prompt_id, task.attempt, task.issued_at))
        reissued = 0
        check = now - self._last_claim_check >= timedelta(seconds=self.config.tasks.claim_check_s)
        claims: dict[str, tuple[str | None, datetime | None]] = {}
        for task_id in sorted(claimed & open_ids):
            claims[task_id] = (None, None)
            if not check:
                continue
            try:
                found = lake_tasks.read_claim(self.store, model.id, task_id)
                void = found is not None and found[0].expired(now)
            except LakeflowError as e:  # a claim no rollout service wrote: void, the task goes out again
                log.warning("%s", e)
                found, void = None, True
            if void:
                self.store.delete(layout.claim_key(model.id, task_id))  # open for another RaaS
                reissued += 1
                del claims[task_id]
            elif found is not None:
                claims[task_id] = (found[0].raas_id, found[0].expires_at)
        self.catalog.tasks.replace(model.id, [r + claims.get(r[0], (None, None)) for r in rows])
        if check:
            self._last_claim_check = now
        return reissued

    def release(self, done: list[tuple[str, str]]) -> None:
        """Remove the objects of finished tasks (groups whose task id has no object cost nothing)."""
        for model_id in sorted({m for m, _ in done}):
            open_ids, _ = lake_tasks.list_tasks(self.store, model_id)
            for task_id in sorted({t for m, t in done if m == model_id} & open_ids):
                lake_tasks.release_task(self.store, model_id, task_id)
                self.catalog.tasks.remove(model_id, task_id)

    def top_up(self, model: ModelConfig, trainer_version: int, now: datetime) -> int:
        """Issue tasks until the model's in-flight target is met; returns how many were issued."""
        target = int(model.prompts_per_step * (model.steps_ahead + 1) * self.config.tasks.buffer_factor)
        want = target - self.catalog.tasks.in_flight(model.id)
        if want <= 0:
            return 0
        self._adapt_greso(model, trainer_version)
        chosen = self._curate(model, want)
        for prompt_id, prompt, answer, task_type, dataset in chosen:
            task = lake_tasks.Task(
                task_id=f"t{uuid.uuid4().hex[:16]}",
                model_id=model.id,
                prompt_id=prompt_id,
                prompt=prompt,
                answer=answer,
                n_samples=model.n_samples,
                task_type=task_type,
                dataset=dataset,
                issued_at=now,
            )
            lake_tasks.write_task(self.store, task)
            self.catalog.tasks.add(model.id, task.task_id, prompt_id, now)
        return len(chosen)

    def _curate(self, model: ModelConfig, want: int) -> list[tuple[str, str, str, str, str]]:
        policy = load_policy("curation", model.policies.curation)
        g = self.greso[model.id]
        params: dict[str, Any] = {
            "model_id": model.id,
            "n": want,
            "round": self.round,
            "solved_threshold": model.solved_threshold,
            "p_easy": g.p_easy,
            "p_hard": g.p_hard,
            "floor_easy": model.greso.floor_easy,
            "floor_hard": model.greso.floor_hard,
            "max_rejections": model.greso.max_rejections,
        }
        self.round += 1
        picked, rejected = self.catalog.tasks.choose_prompts(model.id, policy, params, want)
        self._count_skips(model.id, picked, rejected)
        self.catalog.tasks.record_curation(model.id, picked, rejected)
        return self.catalog.tasks.prompts_by_id(model.id, picked)

    def _count_skips(self, model_id: str, picked: list[str], rejected: list[str]) -> None:
        g = self.greso[model_id]
        ids = picked + rejected
        if not ids:
            return
        easy = self.catalog.tasks.easy_prompts(model_id, ids)
        for pid in ids:
            kind = "easy" if pid in easy else "hard"
            g.seen[kind] += 1
            g.skipped[kind] += pid in rejected

    def _adapt_greso(self, model: ModelConfig, version: int) -> None:
        """Once per trainer version: move p toward the target skip shares by ±step."""
        g = self.greso[model.id]
        if version <= g.version:
            return
        if g.version >= 0:
            for kind, target in (("easy", model.greso.target_skip_easy), ("hard", model.greso.target_skip_hard)):
                if not g.seen[kind]:
                    continue
                share = g.skipped[kind] / g.seen[kind]
                delta = model.greso.step if share > target else -model.greso.step  # skip less → raise p
                p = min(1.0, max(model.greso.step, getattr(g, f"p_{kind}") + delta))
                setattr(g, f"p_{kind}", p)
        g.version = version
        g.seen = {"easy": 0, "hard": 0}
        g.skipped = {"easy": 0, "hard": 0}
