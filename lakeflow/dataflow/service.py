"""`lakeflow dataflow`: the loop that turns commits into batches, for every model of the run.

One iteration: renew the lease → ingest new commits → complete groups (filter policy) →
release finished tasks → adopt batch objects this catalog has not recorded → serve the
next batches (up to `steps_ahead` beyond the trainer) → keep tasks outstanding → balance
report and catalog checkpoint when due. Kill it at any point and start it again: it
restores the newest checkpoint and catches up from the bucket.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from lakeflow.catalog.policy import load_policy
from lakeflow.catalog.serving import ServingPolicies
from lakeflow.catalog.state import Catalog, check_policy
from lakeflow.dataflow.balance import balance_report
from lakeflow.dataflow.checkpoint import restore_checkpoint, save_checkpoint
from lakeflow.dataflow.committer import Committer
from lakeflow.dataflow.compact import CompactStats
from lakeflow.dataflow.config import DataflowConfig, ModelConfig
from lakeflow.dataflow.credit import credit_batch
from lakeflow.dataflow.datasets import load_prompts
from lakeflow.dataflow.ingest import Ingestor
from lakeflow.dataflow.issuer import GresoState, TaskIssuer
from lakeflow.dataflow.lease import serving_lease
from lakeflow.dataflow.metrics import DataflowMetrics
from lakeflow.errors import PolicyError
from lakeflow.io import Store
from lakeflow.lake import CommitCursor, layout
from lakeflow.lake.batch import list_batch_steps, read_batch, write_batch
from lakeflow.lake.lease import utc_clock
from lakeflow.lake.quarantine import GROUP_SOURCE
from lakeflow.weights.manifest import latest_version, read_latest

log = logging.getLogger("lakeflow.dataflow")
FINAL_SETTLE_S = 2.0  # at the end of a run, how recent a newest commit is waited for before the last compaction


@dataclass
class Counters:
    """What the process did since it started (printed by the CLI, tested)."""

    commits: int = 0
    samples: int = 0
    batches: int = 0
    adopted: int = 0
    tasks_issued: int = 0
    claims_reissued: int = 0
    groups_kept: int = 0
    groups_filtered: int = 0
    dropped_stale: int = 0
    quarantined: Counter[str] = field(default_factory=Counter)
    policy_failures: Counter[str] = field(default_factory=Counter)  # calls that fell back to the default policy


class DataflowService:
    """The dataflow process for one lake."""

    def __init__(
        self,
        store: Store,
        config: DataflowConfig,
        catalog_path: str | None = None,
        lease_clock: Callable[[], datetime] = utc_clock,
    ) -> None:
        self.store = store
        self.config = config
        self.catalog = Catalog(catalog_path)
        self.lease = serving_lease(store, timedelta(seconds=config.loop.lease_ttl_s), clock=lease_clock)
        self.ingestor = Ingestor(store, self.catalog, config)
        self.issuer = TaskIssuer(store, self.catalog, config)
        self.cursor = CommitCursor()
        self.counters = Counters()
        self.counters.policy_failures = self.catalog.policy_failures  # counted where policies run
        self.catalog.policy_timeout_s = config.loop.policy_timeout_s
        self.serving = {m.id: _serving(m) for m in config.models}
        self._filters = {m.id: load_policy("filter", m.policies.filter) for m in config.models}
        credited = [m for m in config.models if m.policies.advantage != "none"]
        self._advantages = {m.id: load_policy("advantage", m.policies.advantage) for m in credited}
        check_policies(config)  # a broken policy stops the start, never a running service
        self._last_checkpoint = time.monotonic()
        self._last_balance = 0.0
        self.metrics = DataflowMetrics(store, self.catalog, [m.id for m in config.models], config.loop.metrics_s)
        self.committer = Committer(store, self.catalog, config, self.lease)  # the table's one writer

    # --- lifecycle --------------------------------------------------------------------------

    def start(self, wait: bool = False) -> None:
        """Take the lease, then rebuild state from the newest checkpoint."""
        self.lease.acquire(wait=wait, poll_s=min(5.0, self.config.loop.lease_ttl_s / 3))
        self.cursor, state = restore_checkpoint(self.store, self.catalog)
        self.committer.checkpointed = self.cursor
        for model_id, g in state.get("greso", {}).items():
            if model_id in self.issuer.greso:
                self.issuer.greso[model_id] = GresoState(**g)
        self.issuer.round = int(state.get("round", 0))
        for model in self.config.models:
            if model.dataset is not None and not self.catalog.tasks.has_prompts(model.id):
                self.catalog.tasks.load_prompts(model.id, load_prompts(model.dataset))

    def finish(self) -> CompactStats:
        """The end of a run (SIGTERM, or the last iteration): ingest every commit there is, complete its
        groups, and compact everything ingested into the table. A commit stamped in the last
        FINAL_SETTLE_S is waited for (its stamp is taken right before its small PUT lands)."""
        if not self.lease.valid():
            return CompactStats()
        self._drain()
        position = self.cursor.position
        if position is not None:
            age = (datetime.now(UTC) - layout.parse_commit_key(position).when).total_seconds()
            if 0 <= age < FINAL_SETTLE_S:
                time.sleep(FINAL_SETTLE_S - age)
                self._drain()
        return self.committer.final(self.cursor)

    def _drain(self) -> None:
        while self.lease.valid():
            if self.lease.due():
                self.lease.renew()
            self.cursor, stats = self.ingestor.ingest(self.cursor, self.config.loop.ingest_commits)
            self.counters.commits += stats.commits
            self.counters.samples += stats.samples
            self.counters.quarantined.update(stats.quarantined)
            for model in self.config.models:
                self._complete(model)  # oversized groups are quarantined before they are compacted
            if stats.commits == 0:
                return

    def close(self, checkpoint: bool = True) -> None:
        """Checkpoint (while the lease is still ours), give the lease back, close the catalog."""
        if checkpoint and self.lease.valid():
            self.checkpoint()
        self.metrics.close()  # the last dataflow_stats window
        self.lease.release()
        self.catalog.close()

    def checkpoint(self) -> int:
        state: dict[str, Any] = {
            "greso": {k: vars(v) for k, v in self.issuer.greso.items()},
            "round": self.issuer.round,
        }
        seq = save_checkpoint(self.store, self.catalog, self.cursor, state)
        self.committer.checkpointed = self.cursor  # retention deletes only what a restart will not re-ingest
        self._last_checkpoint = time.monotonic()
        return seq

    def run(self, iterations: int | None = None, stop: Any = None) -> None:
        """Loop until `iterations` are done or `stop()` is true; sleeps when idle (poll_s, doubling up to
        max_poll_s while nothing happens)."""
        loop = self.config.loop
        done, wait = 0, loop.poll_s
        while (iterations is None or done < iterations) and not (stop and stop()):
            busy = self.step()
            done += 1
            if busy:
                wait = loop.poll_s
            elif iterations is None or done < iterations:
                time.sleep(wait)
                wait = min(wait * 2, max(loop.max_poll_s or loop.poll_s, loop.poll_s))

    # --- one iteration ----------------------------------------------------------------------

    def step(self) -> bool:
        """One pass over every model; True when anything was ingested, served or issued."""
        if self.lease.due():
            self.lease.renew()
        now = datetime.now(UTC)
        for model in self.config.models:
            # The manifests decide (a LATEST deleted or moved back must not make honest new samples look
            # too new); the pointer only where no manifest exists.
            version = latest_version(self.store, model.id)
            if version is None:
                pointer = read_latest(self.store, model.id)
                version = pointer[0].version if pointer else None
            if version is not None:
                self.catalog.set_weights_version(model.id, version)
        self.cursor, stats = self.ingestor.ingest(self.cursor, self.config.loop.ingest_commits)
        self.counters.commits += stats.commits
        self.counters.samples += stats.samples
        self.counters.quarantined.update(stats.quarantined)
        busy = stats.commits > 0
        for model in self.config.models:
            busy |= self._complete(model)
            busy |= self._adopt(model)
            busy |= self._serve(model)
            if self.lease.valid() and model.dataset is not None:  # a model without a dataset issues no tasks
                self.counters.claims_reissued += self.issuer.sync(model, now)
                issued = self.issuer.top_up(model, self._trainer_version(model), now)
                self.counters.tasks_issued += issued
                busy |= issued > 0
        if time.monotonic() - self._last_balance >= min(30.0, self.config.loop.balance_window_s / 10):
            balance_report(self.store, self.catalog, timedelta(seconds=self.config.loop.balance_window_s), now)
            self._last_balance = time.monotonic()
        if time.monotonic() - self._last_checkpoint >= self.config.loop.checkpoint_s and self.lease.valid():
            self.checkpoint()
        self.committer.tick(self.cursor)  # compaction and retention, when due
        self.metrics.tick()  # a dataflow_stats window every loop.metrics_s
        return busy

    def _trainer_version(self, model: ModelConfig) -> int:
        return self.catalog.weights_version(model.id) or 0

    def _complete(self, model: ModelConfig) -> bool:
        now = datetime.now(UTC)
        for group_id, episodes, ids in self.catalog.drop_oversized(model.id, model.n_samples):
            reason = f"group has {episodes} episodes, more than n_samples ({model.n_samples})"
            self.ingestor.quarantine(f"{GROUP_SOURCE}{model.id}/{group_id}", len(ids), reason, now, ids)
            self.counters.quarantined["group has more episodes than n_samples"] += len(ids)
        result = self.catalog.complete_groups(model.id, model.n_samples, self._filters[model.id], model.pass_rate_decay)
        if not result.kept + result.filtered:
            return False
        self.counters.groups_kept += result.kept
        self.counters.groups_filtered += result.filtered
        self.issuer.release(result.tasks)
        return True

    def _adopt(self, model: ModelConfig) -> bool:
        """Record batch objects that exist in the bucket but not in the catalog (written before a crash)."""
        step = self.catalog.serving.next_step(model.id)
        adopted = False
        for existing in list_batch_steps(self.store, model.id, after=step - 1 if step else None):
            if existing != step:
                log.warning(
                    "batch %s of %s exists but %s is missing; not adopting beyond a gap", existing, model.id, step
                )
                break
            table, meta = read_batch(self.store, model.id, existing)
            kinds = table.select(["group_id", "kind"]).to_pylist()
            fresh = list(dict.fromkeys(r["group_id"] for r in kinds if r["kind"] == "fresh"))
            replay = list(dict.fromkeys(r["group_id"] for r in kinds if r["kind"] == "replay"))
            self.catalog.serving.record_batch(
                model.id,
                existing,
                fresh,
                replay,
                table.num_rows,
                model.replay_capacity,
                datetime.fromisoformat(meta.get("created_at", datetime.now(UTC).isoformat())),
            )
            self.counters.adopted += 1
            step += 1
            adopted = True
        return adopted

    def _serve(self, model: ModelConfig) -> bool:
        served = False
        while self.lease.valid():
            step = self.catalog.serving.next_step(model.id)
            if step > self._trainer_version(model) + model.steps_ahead:
                break
            plan = self.catalog.serving.plan_batch(model.id, step, self.serving[model.id])
            self.counters.dropped_stale += plan.dropped_stale
            if not plan.ready:
                break
            table = self.catalog.serving.batch_table(model.id, plan)
            if model.id in self._advantages:
                table = credit_batch(self.ingestor.reader, self.catalog, model, step, self._advantages[model.id], table)
            meta = {"fresh_groups": len(plan.fresh), "replay_groups": len(plan.replay), "lease_epoch": self.lease.epoch}
            try:
                write_batch(self.store, model.id, step, table, meta)
            except FileExistsError:
                # Written by an earlier life of this process (or a predecessor): adopt it instead.
                self._adopt(model)
                continue
            self.catalog.serving.record_batch(
                model.id,
                step,
                plan.fresh,
                plan.replay,
                table.num_rows,
                model.replay_capacity,
                datetime.now(UTC),
            )
            self.counters.batches += 1
            served = True
        return served


def check_policies(config: DataflowConfig) -> None:
    """Parse and dry-run every configured policy of every model; PolicyError naming each one that fails."""
    problems = []
    for model in config.models:
        p = model.policies
        named = {"filter": p.filter, "staleness": p.staleness, "fresh": p.fresh, "curation": p.curation}
        if p.replay != "none":
            named["replay"] = p.replay
        if p.advantage != "none":
            named["advantage"] = p.advantage
        if p.reward != "stored":
            named["reward"] = p.reward
        for kind, name in named.items():
            try:
                check_policy(load_policy(kind, name), config.loop.policy_timeout_s)
            except PolicyError as e:
                problems.append(f"model {model.id}, {kind} policy: {e}")
    if problems:
        raise PolicyError("; ".join(problems))


def _serving(model: ModelConfig) -> ServingPolicies:
    p = model.policies
    return ServingPolicies(
        staleness=load_policy("staleness", p.staleness),
        fresh=load_policy("fresh", p.fresh),
        replay=None if p.replay == "none" else load_policy("replay", p.replay),
        groups_per_step=model.prompts_per_step,
        max_staleness=model.max_staleness,
        replay_ratio=model.replay_ratio,
        replay_capacity=model.replay_capacity,
    )
