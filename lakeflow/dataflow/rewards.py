"""Rewards at ingest: each model's reward policy (`policies.reward`) chooses the reward the catalog takes for
the samples it ingests, so a run can train on a re-scoring (`lakeflow rescore`) instead of the stored rewards.

Before a policy runs, the lake's `rescores` objects committed since the last call are loaded into the
catalog's `rescores` table (all of them again after a restart: the table is not checkpointed). A sample the
policy gives no reward, or a reward that is not finite or is over the model's `reward_bound`, is quarantined
with the reason: no stored reward stands in for a missing new one. A policy that fails raises PolicyError
before anything of the call is ingested (the dataflow stops rather than train on another reward).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from lakeflow.catalog.policy import Policy, load_policy
from lakeflow.catalog.state import Catalog
from lakeflow.dataflow.config import DataflowConfig, ModelConfig
from lakeflow.io import Store
from lakeflow.lake.metrics import read_metric_objects, visible_objects

log = logging.getLogger("lakeflow.dataflow")
# quarantine(reason, rows of the part) of the caller's, for the samples a reward policy leaves without a reward
Refuse = Callable[[str, np.ndarray], None]


class IngestRewards:
    """The reward policies of a run's models and the rescores they read (one per ingestor)."""

    def __init__(self, store: Store, catalog: Catalog, config: DataflowConfig) -> None:
        self.store, self.catalog, self.timeout_s = store, catalog, config.loop.policy_timeout_s
        self.models = {m.id: m for m in config.models if m.policies.reward != "stored"}
        self.policies: dict[str, Policy] = {i: load_policy("reward", m.policies.reward) for i, m in self.models.items()}
        self._loaded: set[str] = set()  # rescores objects in the catalog

    def refresh(self) -> int:
        """Load the rescores objects committed since the last call; the rows loaded."""
        if not self.policies:
            return 0
        keys, _ = visible_objects(self.store, "rescores")
        new = [k for k in keys if k not in self._loaded]
        rows, unread = read_metric_objects(self.store, "rescores", new)
        for key, why in unread:
            log.warning("rescores object %s is left out of the reward policies: %s", key, why)
        self.catalog.rewards.load_rescores(rows)
        self._loaded.update(k for k in new if k not in dict(unread))
        return int(rows.num_rows)

    def apply(self, model_id: str, part: pa.Table, refuse: Refuse) -> pa.Table:
        """`part` (a shard's rows to ingest) with each sample's reward from the model's reward policy; the
        rows it gives no usable reward are handed to `refuse` and left out."""
        policy = self.policies.get(model_id)
        if policy is None or part.num_rows == 0:
            return part
        model = self.models[model_id]
        params: dict[str, Any] = {"model_id": model_id, "rescore": model.rescore or ""}
        answer = self.catalog.rewards.rewards(model_id, policy, params, part, self.timeout_s)
        given = dict(zip(answer.column("sample_id").to_pylist(), answer.column("reward").to_pylist(), strict=True))
        rewards = [given.get(s) for s in part.column("sample_id").to_pylist()]
        missing = np.array([r is None for r in rewards], dtype=bool)
        bad = np.array([r is not None and not _usable(r, model) for r in rewards], dtype=bool)
        if missing.any():
            refuse(f"no reward from reward policy {policy.name!r} (not re-scored, or the re-scoring failed)", missing)
        if bad.any():
            refuse(f"reward policy {policy.name!r} gave a reward that is not finite or over reward_bound", bad)
        index = part.schema.get_field_index("reward")
        part = part.set_column(index, "reward", pa.array([r if r is not None else 0.0 for r in rewards], pa.float64()))
        keep = ~(missing | bad)
        return part if keep.all() else part.filter(pa.array(keep))


def _usable(reward: float, model: ModelConfig) -> bool:
    return math.isfinite(reward) and abs(reward) <= model.reward_bound
