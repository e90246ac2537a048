"""The rollout service: claim a task, run the workflow, commit the group, follow the weights.

Loop: between groups (never inside one) pull a newer LATEST of each model and reload its engine
(multi-policy workflows: one engine per model of `roles`; each sample is stamped with its own
model and that model's version, and `extra.versions` holds every model's; a service with a
`weights_url` learns of new versions from a background thread that asks the source every
`weights_poll_s`, so a far source's round trips stay out of the loop); claim an
open task (create-only: another instance's claim is skipped); generate and score the group
while a background thread renews the claims and writes the heartbeat; renew once more, then
commit. Groups that finish within `commit_window_s` of each other (at most `commit_max_groups`)
go into one shard per model, so writers and the dataflow's ingest make fewer, larger requests;
a group never waits longer than the window (nor when the service runs out of work or stops).
A lost claim means the task was reissued: the group is dropped (abandoned). `stop()` (SIGTERM)
lets the current group finish and commits what is pending, then exits; a process killed outright
leaves its claims to expire, and the dataflow reissues the tasks.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import tempfile
import threading
import time
import uuid
from collections import deque
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from lakeflow.errors import ConfigError, LakeflowError, WeightsIntegrityError
from lakeflow.io import Store, open_weights_source
from lakeflow.lake import ShardWriter, layout
from lakeflow.lake import tasks as lake_tasks
from lakeflow.models import resolve_model
from lakeflow.raas.config import RaasConfig
from lakeflow.raas.engines import Engine, build_engine
from lakeflow.raas.metrics import RolloutMetrics
from lakeflow.raas.rewards import build_reward
from lakeflow.raas.workflows import POLICY, Sampling, Trajectory, build_workflow
from lakeflow.tracking import MetricSink
from lakeflow.weights import TransferOptions, latest_version, local_version, pull

log = logging.getLogger(__name__)


@dataclass
class RaasStats:
    """Counters of one service's life."""

    groups: int = 0  # groups committed
    samples: int = 0  # samples committed
    tokens: int = 0  # response tokens committed
    abandoned: int = 0  # groups dropped because the claim was lost
    reloads: int = 0  # weight versions loaded into the engine
    pulled_bytes: int = 0  # weight bytes fetched from the weights source (every model)
    pull_s: float = 0.0  # seconds spent pulling and verifying them


@dataclass
class _Held:
    task: lake_tasks.Task
    claim: lake_tasks.Claim
    etag: str
    renewed: float  # time.monotonic() of the last successful renewal
    lost: bool = False


@dataclass
class _Done:
    """A generated group waiting in the commit window (its claim still held and renewed)."""

    held: _Held
    trajectories: list[Trajectory]
    versions: dict[str, int]
    seconds: float  # generating and scoring it took


class RolloutService:
    """One rollout service instance: claims its model's tasks; hosts one engine per model of the workflow's roles."""

    def __init__(self, store: Store, model_id: str, config: RaasConfig | None = None, engine: Engine | None = None):
        self.store = store
        self.model_id = layout.check_name(model_id, "model id")
        self.config = config or RaasConfig()
        self.raas_id = layout.check_name(self.config.id or f"raas-{uuid.uuid4().hex[:12]}", "rollout service id")
        self.roles = dict(self.config.roles) or {POLICY: self.model_id}
        if self.model_id not in self.roles.values():
            raise ConfigError(
                f"roles {self.roles} do not include this service's model {self.model_id!r}: the model whose tasks it "
                "claims must play one of the workflow's roles"
            )
        self.models = [self.model_id, *sorted(set(self.roles.values()) - {self.model_id})]
        for m in self.models:
            layout.check_name(m, "model id")
        own = engine if engine is not None else build_engine(self.config.engine, self.config.seed)
        self.engines = {
            m: own if m == self.model_id else build_engine(self.config.engine, self.config.seed) for m in self.models
        }
        self.versions: dict[str, int | None] = dict.fromkeys(self.models)  # weights version loaded per model
        self.loaded_sha256: dict[str, str] = {}  # state checksum of the loaded weights, per model
        self.workflow = build_workflow(self.config.workflow)
        self.sampling = Sampling(self.config.max_new_tokens, self.config.temperature, self.config.truncated_reward)
        # where weights come from: the lake, or a read-only source (a regional mirror, a CDN)
        url = self.config.weights_url
        self.weights: Store = open_weights_source(url, self.config.weights_options) if url else store
        self.writer = ShardWriter(store, self.raas_id, max_rows=1 << 30)  # a group is never split across shards
        self.stats = RaasStats()
        self.state = "starting"
        self.started_at = datetime.now(UTC)
        self._own_cache = self.config.cache_dir is None
        self.cache_dir = self.config.cache_dir or tempfile.mkdtemp(prefix="lakeflow-raas-")
        self._stop = threading.Event()
        self._lock = threading.Lock()  # guards _held and the heartbeat fields
        self._newest: dict[str, int | None] = {}  # newest version per model, found by the watcher thread
        self._refused: dict[str, int] = {}  # the version whose pull last failed, per model (logged once)
        self._held: _Held | None = None  # the task being generated
        self._pending: list[_Done] = []  # generated groups in the commit window, oldest first
        self._window_opened = 0.0  # time.monotonic() when the oldest pending group finished
        self._speed: deque[tuple[int, float]] = deque(maxlen=32)  # (tokens, seconds) of recent groups
        run = f"rollout_stats/{self.raas_id}"
        sink = MetricSink(store, "rollout_stats", self.raas_id, self.config.tracker, run=run)
        self.metrics = RolloutMetrics(sink, self.raas_id, self.config)  # the rollout_stats windows

    @property
    def engine(self) -> Engine:
        """The engine of the service's own model."""
        return self.engines[self.model_id]

    @property
    def version(self) -> int | None:
        """The weights version of the service's own model in its engine."""
        return self.versions[self.model_id]

    # --- control ------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the loop to exit after the current group (safe from a signal handler)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self, max_groups: int | None = None) -> RaasStats:
        """Roll out groups until `stop()`, or until this call has committed `max_groups` groups."""
        first = self.stats.groups
        done = threading.Event()
        keeper = threading.Thread(target=self._keep, args=(done,), name=f"{self.raas_id}-keeper", daemon=True)
        threads = [keeper]
        if self.config.weights_url:  # a far source: ask it for new versions in the background
            threads.append(threading.Thread(target=self._watch, args=(done,), name=f"{self.raas_id}-weights"))
        self._heartbeat()
        for t in threads:
            t.start()
        try:
            while not self.stopping and (max_groups is None or self._groups() - first < max_groups):
                if not self.step():
                    self._stop.wait(self.config.poll_s)
                self.metrics.tick(self.versions)
            self.commit_pending()
            self.state = "stopped"
        except BaseException:
            self.state = "failed"
            raise
        finally:
            done.set()
            for t in threads:
                t.join()
            self._heartbeat()
            self.metrics.close(self.versions)
        return self.stats

    def close(self) -> None:
        """Remove the weights cache when the service made it (a configured cache_dir is kept for restarts)."""
        if self._own_cache:
            shutil.rmtree(self.cache_dir, ignore_errors=True)

    # --- one iteration ------------------------------------------------------------------

    def _groups(self) -> int:
        """Groups committed or waiting in the commit window."""
        with self._lock:
            return self.stats.groups + len(self._pending)

    def step(self) -> bool:
        """Refresh weights, then roll out one task; False when there was nothing to do."""
        if self._window_due():
            self.commit_pending()
        self.refresh_weights()
        versions = dict(self.versions)
        if any(v is None for v in versions.values()):
            self.state = "waiting-for-weights"
            self.commit_pending()
            return False
        held = self._claim_next()
        if held is None:
            self.state = "idle"
            self.commit_pending()  # nothing else to wait for
            return False
        try:
            self._roll_out(held, {m: v for m, v in versions.items() if v is not None})
        finally:
            with self._lock:
                self._held = None
        return True

    def refresh_weights(self) -> bool:
        """Load newer published versions into the engines; True when any weights changed."""
        changed = False
        for model_id in self.models:
            changed |= self._refresh(model_id)
        return changed

    def _refresh(self, model_id: str) -> bool:
        engine = self.engines[model_id]
        if self.config.model is not None and model_id == self.model_id:  # a frozen model: loaded once, version 0
            if self.versions[model_id] is None:
                engine.load(resolve_model(self.config.model, self.cache_dir))
                self.versions[model_id] = 0
                return True
            return False
        if model_id in self._newest:  # what the watcher last found
            latest = self._newest[model_id]
        else:
            try:
                latest = latest_version(self.weights, model_id)
            except OSError as e:  # a weights source that cannot be reached now: keep the loaded weights
                log.warning("cannot read the newest version of %s from %s: %s", model_id, self.weights.url, e)
                return False
        self.metrics.latest[model_id] = latest
        current = self.versions[model_id]
        if latest is None or (current is not None and latest <= current):  # never back: LATEST may roll back
            return False
        self.state = "pulling-weights"
        pulling = time.monotonic()
        try:
            options = TransferOptions(workers=self.config.decode_workers, processes=self.config.decode_processes)
            result = pull(self.weights, model_id, os.path.join(self.cache_dir, model_id), latest, options)
        except (WeightsIntegrityError, OSError) as e:  # broken, collected, not yet mirrored, unreachable: try later
            if self._refused.get(model_id) != latest:  # one line per version, not one per group
                log.warning("cannot pull %s version %s (keeping the loaded weights): %s", model_id, latest, e)
            self._refused[model_id] = latest
            return False
        engine.load(result.path)
        pull_s = time.monotonic() - pulling
        self.metrics.pull(model_id, result.bytes_fetched, pull_s)
        with self._lock:
            self.stats.pulled_bytes += result.bytes_fetched
            self.stats.pull_s += pull_s
        self.versions[model_id] = result.version
        marker = local_version(result.path) or {}
        self.loaded_sha256[model_id] = str(marker.get("state_sha256", ""))  # verified against the manifest
        self.stats.reloads += 1
        log.info("%s: loaded %s version %s (%s)", self.raas_id, model_id, result.version, result.route)
        return True

    def _claim_next(self) -> _Held | None:
        open_ids, claimed = lake_tasks.list_tasks(self.store, self.model_id)
        candidates = sorted(open_ids - claimed)
        random.shuffle(candidates)  # instances starting together do not all race for the same task
        ttl = timedelta(seconds=self.config.claim_ttl_s)
        for task_id in candidates:
            if self.stopping:
                return None
            if lake_tasks.claim_task(self.store, self.model_id, task_id, self.raas_id, ttl) is None:
                continue  # another instance has it
            try:
                task = lake_tasks.read_task(self.store, self.model_id, task_id)
            except FileNotFoundError:  # released between the listing and the claim: drop our stray claim
                self.store.delete(layout.claim_key(self.model_id, task_id))
                continue
            except LakeflowError as e:
                log.error("skipping task %s: %s", task_id, e)  # our claim expires; the dataflow sees it
                continue
            found = lake_tasks.read_claim(self.store, self.model_id, task_id)
            if found is None or found[0].raas_id != self.raas_id:
                continue  # taken away already
            held = _Held(task, found[0], found[1], time.monotonic())
            with self._lock:
                self._held = held
            return held
        return None

    def _roll_out(self, held: _Held, versions: dict[str, int]) -> None:
        """Generate and score one group with the weights of `versions` (never reloaded meanwhile); it joins
        the commit window, and the window is committed when due."""
        task = held.task
        self.state = "generating"
        reward = build_reward(task.task_type, self.config.reward_max_chars, self.config.reward)  # PluginError: stop
        started = time.monotonic()
        engines = {role: self.engines[model_id] for role, model_id in self.roles.items()}
        trajectories = self.workflow(task, engines, reward, self.sampling)
        seconds = time.monotonic() - started
        with self._lock:
            self._speed.append((sum(len(t.response_ids) for t in trajectories), seconds))
            if not self._pending:
                self._window_opened = time.monotonic()
            self._pending.append(_Done(held, trajectories, versions, seconds))
            self._held = None  # renewed as a pending group from now on
        if self._window_due():
            self.commit_pending()

    def _window_due(self) -> bool:
        """True when the pending groups must be committed before another group is generated: the window
        is full, or would pass while the next group is generated (as long as the last one took)."""
        with self._lock:
            if not self._pending:
                return False
            if len(self._pending) >= self.config.commit_max_groups:
                return True
            waited = time.monotonic() - self._window_opened
            return waited + self._pending[-1].seconds >= self.config.commit_window_s

    def commit_pending(self) -> None:
        """Renew each pending group's claim once more, drop the groups whose claim was lost, commit the
        rest (one shard per model)."""
        with self._lock:
            pending = list(self._pending)
        if not pending:
            return
        kept = []
        for done in pending:
            if self._renew(done.held, force=True):
                kept.append(done)
                continue
            self.stats.abandoned += 1
            self.metrics.abandoned(self.model_id)
            log.warning("%s: lost the claim on %s; dropping its group", self.raas_id, done.held.task.task_id)
        self.state = "committing"
        for done in kept:
            for t in done.trajectories:
                self.writer.add(self._sample(done.held.task, t, done.versions))
        self.writer.flush()
        with self._lock:
            self._pending = self._pending[len(pending) :]
            for done in kept:
                self.stats.groups += 1
                self.stats.samples += len(done.trajectories)
                self.stats.tokens += sum(len(t.response_ids) for t in done.trajectories)
        for done in kept:
            roles = [(self.roles.get(t.role, self.model_id), t) for t in done.trajectories]
            self.metrics.group(done.held.task.task_type, roles, done.seconds)

    def _sample(self, task: lake_tasks.Task, t: Trajectory, versions: dict[str, int]) -> dict[str, Any]:
        model_id = self.roles.get(t.role, self.model_id)
        version = versions[model_id]
        extra = {**t.extra, "attempt": task.attempt}
        if len(versions) > 1:  # the other roles' weights shaped this sample too
            extra["versions"] = versions
        return {
            "sample_id": uuid.uuid4().hex,
            "episode_id": t.episode_id,
            "group_id": task.task_id,
            "prompt_id": task.prompt_id,
            "task_id": task.task_id,
            "model_id": model_id,
            "role": t.role,
            "policy_version": version,
            "max_version": version,
            "prompt_ids": t.prompt_ids,
            "response_ids": t.response_ids,
            "response_logprobs": t.response_logprobs,
            "loss_mask": t.loss_mask,
            "reward": float(t.reward),
            "finish_reason": t.finish_reason,
            "task_type": task.task_type,
            "dataset": task.dataset,
            "raas_id": self.raas_id,
            "region": self.config.region,
            "extra": json.dumps(extra, sort_keys=True),
        }

    # --- claim renewal and heartbeat (background thread) --------------------------------

    def _renew(self, held: _Held, force: bool = False) -> bool:
        """Extend the claim when a third of its lifetime has passed (or now); False once it is lost."""
        with self._lock:
            if held.lost:
                return False
            if not force and time.monotonic() - held.renewed < self.config.claim_ttl_s / 3:
                return True
            ttl = timedelta(seconds=self.config.claim_ttl_s)
            renewed = lake_tasks.renew_claim(self.store, self.model_id, held.claim, held.etag, ttl)
            if renewed is None:
                held.lost = True
                return False
            held.claim, held.etag, held.renewed = renewed[0], renewed[1], time.monotonic()
            return True

    def _watch(self, done: threading.Event) -> None:
        """Every `weights_poll_s`, ask the weights source for each model's newest version (a far source
        costs round trips that would otherwise sit between every two groups)."""
        models = [m for m in self.models if self.config.model is None or m != self.model_id]
        while True:
            for model_id in models:
                try:
                    self._newest[model_id] = latest_version(self.weights, model_id)
                except OSError as e:
                    log.warning("cannot read the newest version of %s from %s: %s", model_id, self.weights.url, e)
            if done.wait(self.config.weights_poll_s):
                return

    def _keep(self, done: threading.Event) -> None:
        tick = min(self.config.heartbeat_s, self.config.claim_ttl_s / 3)
        last_beat = time.monotonic()
        while not done.wait(tick):
            try:
                with self._lock:
                    held = [h for h in [self._held] if h is not None] + [d.held for d in self._pending]
                for h in held:
                    self._renew(h)
                if time.monotonic() - last_beat >= self.config.heartbeat_s:
                    self._heartbeat()
                    last_beat = time.monotonic()
            except Exception:  # a failed PUT must not stop renewals; the next tick retries
                log.warning("%s: claim renewal or heartbeat failed", self.raas_id, exc_info=True)

    def heartbeat(self) -> dict[str, Any]:
        """The stats/raas/<id>.json record as it would be written now."""
        with self._lock:
            tokens = sum(t for t, _ in self._speed)
            seconds = sum(s for _, s in self._speed)
            held = self._held
            return {
                "raas_id": self.raas_id,
                "at": datetime.now(UTC).isoformat(),
                "state": self.state,
                "groups": self.stats.groups,
                "samples": self.stats.samples,
                "tokens_per_s": tokens / seconds if seconds > 0 else 0.0,
                "weights_version": self.version,
                "weights_versions": dict(self.versions),
                "weights_sha256": dict(self.loaded_sha256),
                "region": self.config.region,
                "model_id": self.model_id,
                "engine": self.config.engine.type,
                "task_id": held.task.task_id if held else None,
                "pending_groups": len(self._pending),
                "started_at": self.started_at.isoformat(),
                **{k: v for k, v in asdict(self.stats).items() if k not in ("groups", "samples")},
            }

    def _heartbeat(self) -> None:
        self.store.put(layout.raas_stats_key(self.raas_id), json.dumps(self.heartbeat()).encode())
