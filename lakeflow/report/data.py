"""The report's numbers, read from the lake: no plotting here, so every number is testable alone.

Samples come from the SQL view of committed shards, batches and weight manifests through their
own readers, trainer stats, rollout heartbeats, autoscaler records and quarantine records as JSON
objects; the rollout services' production is `lake.heartbeats`' computation, the one `lakeflow
status` shows. Objects that cannot be read are left out and named in `ReportData.notes`, never
fatal: a report of a live run must not die on one half-written or malformed object.
"""

from __future__ import annotations

import contextlib
import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeGuard

from pydantic import ValidationError

from lakeflow.errors import LakeflowError
from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.lake.batch import list_batch_steps, read_batch
from lakeflow.lake.heartbeats import Production, production, read_heartbeats
from lakeflow.lake.quarantine import read_quarantine
from lakeflow.lakeview import LakeQuery, connect_lake
from lakeflow.report.agents import AgentVersion, agent_by_version, agent_evals
from lakeflow.report.curves import Curves, curves
from lakeflow.report.mismatch import MismatchSource, mismatch_by_source
from lakeflow.report.samples import SampleShown, sample_completions
from lakeflow.weights.manifest import latest_version, read_manifest
from lakeflow.weights.retention import list_versions

MAX_RATE_POINTS = 500  # throughput bins per model: wider bins than a minute for long runs


@dataclass(frozen=True)
class VersionReward:
    """Mean reward of the committed samples one weight version generated."""

    version: int
    mean_reward: float
    samples: int


@dataclass(frozen=True)
class TrainerStep:
    """One trainer step's heartbeat (`stats/trainer/<model>/<step>.json`)."""

    step: int
    at: datetime
    wait_s: float
    step_s: float

    @property
    def wait_fraction(self) -> float:
        total = self.wait_s + self.step_s
        return self.wait_s / total if total > 0 else 0.0


@dataclass(frozen=True)
class WeightVersion:
    """Sizes and sparsity of one published weight version, from its manifest."""

    version: int
    kind: str  # 'full' or 'delta'
    delta_bytes: int | None  # None: no delta stored (version 0, or a full copy that was smaller)
    full_bytes: int  # bytes of the full copy (0 for a delta-only version)
    state_bytes: int  # bytes of all tensors
    params: int
    sparsity: float | None  # fraction of elements unchanged from the previous version
    changed: int | None


@dataclass(frozen=True)
class PoolSize:
    """The size of a model's rollout pool at one autoscaler tick (`stats/autoscale/<model>.json`)."""

    at: datetime
    replicas: int  # what the autoscaler asked for
    live: int | None  # live services it saw (None: the start, before the first observation)


@dataclass
class ModelData:
    """Everything the report shows about one model."""

    model_id: str
    rewards: list[VersionReward] = field(default_factory=list)
    trainer: list[TrainerStep] = field(default_factory=list)
    # throughput: bin edges (epoch seconds, UTC; one more than rates) and samples per minute in each bin
    rate_edges_s: list[float] = field(default_factory=list)
    rate_per_min: list[float] = field(default_factory=list)
    rate_bin_min: int = 1
    # staleness (step - policy_version) of every row the trainer trained on, by the row's kind
    staleness: dict[str, list[int]] = field(default_factory=dict)
    batches: int = 0
    weights: list[WeightVersion] = field(default_factory=list)
    samples: int = 0
    quarantined_rows: int = 0
    curves: Curves = field(default_factory=Curves)  # from the metric tables
    pool_size: list[PoolSize] = field(default_factory=list)  # the autoscaler's ticks, oldest first
    completions: list[SampleShown] = field(default_factory=list)  # best / worst / truncated of a few versions


@dataclass
class ReportData:
    """The whole report: per-model data, plus what could not be read and why."""

    lake_url: str
    models: dict[str, ModelData]
    quarantined_unattributed: int = 0  # quarantined rows whose source names no model
    notes: list[str] = field(default_factory=list)
    rollout: Production = field(default_factory=lambda: Production([], []))  # per service and per pool
    agents: list[AgentVersion] = field(default_factory=list)  # agent episodes per (model, version)
    mismatch: list[MismatchSource] = field(default_factory=list)  # per (model, rollout service, lag)
    agent_evals: list[list[str]] = field(default_factory=list)  # the agentic evaluation's rows (report/agents.py)


def gather(store: Store, now: datetime | None = None) -> ReportData:
    """Read every number the report shows from the lake at `store`; `now` decides which rollout
    services count as live."""
    lake = connect_lake(store)
    notes = [f"left out of the sample view: {key}: {why}" for key, why in lake.skipped]
    ids = model_ids(store, lake)
    models = {m: ModelData(m) for m in ids}
    for m, rows in reward_by_version(lake).items():
        models[m].rewards = rows
        models[m].samples = sum(r.samples for r in rows)
    for m, c in curves(lake).items():
        models.setdefault(m, ModelData(m)).curves = c
    for m, shown in sample_completions(lake).items():
        models[m].completions = shown
    for m, (edges, rate, width) in throughput(lake).items():
        models[m].rate_edges_s, models[m].rate_per_min, models[m].rate_bin_min = edges, rate, width
    for m, data in models.items():
        data.trainer = trainer_steps(store, m, notes)
        steps, data.staleness = staleness(store, m, trained_steps(store, m, data.trainer), notes)
        data.batches = steps
        data.weights = weight_versions(store, m, notes)
        data.pool_size = pool_sizes(store, m, notes)
    per_model, unattributed = quarantined_rows(store, notes)
    for m, n in per_model.items():
        if m in models:
            models[m].quarantined_rows = n
        else:
            unattributed += n
    published = {m: latest_version(store, m) for m in models}
    rollout = production(read_heartbeats(store), now or datetime.now(UTC), published)
    agents, evals = agent_by_version(lake), agent_evals(lake)
    return ReportData(store.url, models, unattributed, notes, rollout, agents, mismatch_by_source(lake), evals)


def model_ids(store: Store, lake: LakeQuery) -> list[str]:
    """Models with committed samples, weights or batches, sorted."""
    found = {r["model_id"] for r in lake.sql("SELECT DISTINCT model_id FROM trajectories").to_pylist()}
    for prefix in (layout.weights_root(), layout.batches_root()):
        for info in store.list(prefix):
            name, sep, _ = info.key[len(prefix) :].partition("/")
            if sep and _valid_name(name):
                found.add(name)
    return sorted(found)


def _valid_name(name: str) -> bool:
    try:
        layout.check_name(name, "model id")
    except ValueError:
        return False  # not a model directory lakeflow wrote
    return True


def reward_by_version(lake: LakeQuery) -> dict[str, list[VersionReward]]:
    """Mean reward and sample count per (model, policy_version) of the committed samples."""
    table = lake.sql(
        "SELECT model_id, policy_version, avg(reward) AS mean_reward, count(*) AS n "
        "FROM trajectories GROUP BY model_id, policy_version ORDER BY model_id, policy_version"
    )
    out: dict[str, list[VersionReward]] = {}
    for r in table.to_pylist():
        out.setdefault(r["model_id"], []).append(VersionReward(r["policy_version"], r["mean_reward"], r["n"]))
    return out


def throughput(lake: LakeQuery) -> dict[str, tuple[list[float], list[float], int]]:
    """Samples per minute per model by the samples' `created_at`: (bin edges in epoch s, rates, bin minutes).

    Bins start at the model's first sample (not at a calendar minute) and are a whole number of
    minutes wide (wider for runs longer than MAX_RATE_POINTS minutes). The last bin ends at the
    last sample and joins the bin before it when shorter than half a width; each rate divides by
    its bin's real duration, so a steady rate plots flat. Bins without samples count as 0.
    """
    table = lake.sql(
        "SELECT model_id, epoch(created_at) AS t, count(*) AS n FROM trajectories GROUP BY 1, 2 ORDER BY 1, 2"
    )
    times: dict[str, list[tuple[float, int]]] = {}
    for r in table.to_pylist():
        times.setdefault(r["model_id"], []).append((float(r["t"]), int(r["n"])))
    out: dict[str, tuple[list[float], list[float], int]] = {}
    for m, points in times.items():
        t0, t1 = points[0][0], points[-1][0]
        width = 60.0 * max(1, math.ceil((t1 - t0) / 60.0 / MAX_RATE_POINTS))
        bins = int((t1 - t0) // width) + 1
        edges = [t0 + i * width for i in range(bins)]
        if bins > 1 and t1 - edges[-1] < width / 2:
            del edges[-1]  # a short last bin joins the one before it
        edges.append(max(t1, edges[-1] + width / 2))  # a lone short bin counts as half a width
        counts = [0] * (len(edges) - 1)
        for t, n in points:
            counts[min(int((t - t0) // width), len(counts) - 1)] += n
        rates = [60.0 * c / (edges[i + 1] - edges[i]) for i, c in enumerate(counts)]
        out[m] = (edges, rates, int(width // 60))
    return out


def trained_steps(store: Store, model_id: str, trainer: list[TrainerStep]) -> set[int]:
    """Steps the trainer finished: those with a heartbeat, and every step below the published LATEST
    (step N publishes version N + 1). Batches written ahead of the trainer are not trained samples."""
    latest = latest_version(store, model_id)
    return {s.step for s in trainer} | set(range(latest or 0))


def trainer_steps(store: Store, model_id: str, notes: list[str]) -> list[TrainerStep]:
    """The trainer heartbeats of one model, by step; malformed ones are named in `notes`."""
    steps = []
    for info in store.list(layout.trainer_stats_prefix(model_id)):
        try:
            raw: dict[str, Any] = json.loads(store.get(info.key))
            steps.append(
                TrainerStep(
                    step=int(raw["step"]),
                    at=datetime.fromisoformat(raw["at"]),
                    wait_s=float(raw["wait_s"]),
                    step_s=float(raw["step_s"]),
                )
            )
        except FileNotFoundError:
            continue  # deleted while listing
        except (ValueError, KeyError, TypeError) as e:
            notes.append(f"trainer stats {info.key} left out: {type(e).__name__}: {e}")
    return sorted(steps, key=lambda s: s.step)


def staleness(store: Store, model_id: str, trained: set[int], notes: list[str]) -> tuple[int, dict[str, list[int]]]:
    """Number of batch objects and, per row kind ('fresh', 'replay'), step - policy_version of every
    row of the batches the trainer trained on (`trained` steps)."""
    out: dict[str, list[int]] = {}
    steps = list_batch_steps(store, model_id)
    for step in steps:
        if step not in trained:
            continue
        try:
            table, _ = read_batch(store, model_id, step)
        except (FileNotFoundError, LakeflowError) as e:
            notes.append(f"batch {model_id} step {step} left out: {e}")
            continue
        for kind, version in zip(
            table.column("kind").to_pylist(), table.column("policy_version").to_pylist(), strict=True
        ):
            out.setdefault(kind, []).append(step - version)
    return len(steps), out


def weight_versions(store: Store, model_id: str, notes: list[str]) -> list[WeightVersion]:
    """Every version with a manifest; versions being published or collected have none and are skipped."""
    out = []
    for v in list_versions(store, model_id):
        try:
            m = read_manifest(store, model_id, v)
        except FileNotFoundError:
            continue
        except ValidationError as e:
            notes.append(f"weights {model_id} version {v}: manifest left out: {e.errors()[0]['msg']}")
            continue
        out.append(
            WeightVersion(
                version=m.version,
                kind=m.kind,
                delta_bytes=m.delta.size if m.delta is not None else None,
                full_bytes=m.full_bytes(),
                state_bytes=m.state_bytes,
                params=m.params,
                sparsity=m.sparsity,
                changed=m.changed,
            )
        )
    return out


def pool_sizes(store: Store, model_id: str, notes: list[str]) -> list[PoolSize]:
    """The autoscaler's record of one model's pool: its starting size, then (replicas, live) per tick.
    No record means no autoscaler ran; a malformed record or tick is named in `notes`."""
    key = layout.autoscale_stats_key(model_id)
    try:
        record = json.loads(store.get(key))
    except FileNotFoundError:
        return []
    except ValueError as e:
        notes.append(f"autoscaler record {key} left out: {e}")
        return []
    if not isinstance(record, dict) or not isinstance(record.get("ticks"), list):
        notes.append(f"autoscaler record {key} left out: not an object with a list of ticks")
        return []
    out = []
    started, initial = record.get("started"), record.get("initial")
    if _number(started) and _count(initial):
        with contextlib.suppress(OverflowError, OSError, ValueError):  # a start no clock shows: the ticks still plot
            out.append(PoolSize(datetime.fromtimestamp(started, UTC), initial, None))
    bad = 0
    for tick in record["ticks"]:
        try:
            at = datetime.fromisoformat(tick["at"])
            at = at.astimezone(UTC) if at.tzinfo else at.replace(tzinfo=UTC)
            replicas, live = tick["replicas"], tick.get("live")
            if not _count(replicas) or not (live is None or _count(live)):
                raise ValueError("replicas and live must be non-negative integers")
        except (ValueError, KeyError, TypeError, OverflowError):
            bad += 1
            continue
        out.append(PoolSize(at, replicas, live))
    if bad:
        notes.append(f"autoscaler record {key}: {bad} malformed tick(s) left out")
    return sorted(out, key=lambda p: p.at)


def _number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def quarantined_rows(store: Store, notes: list[str]) -> tuple[dict[str, int], int]:
    """Quarantined rows per model (by the shard key each record names) and rows naming no model."""
    per_model: dict[str, int] = {}
    unattributed = 0
    records, bad = read_quarantine(store)
    notes += [f"quarantine record {key} left out: {why}" for key, why in bad]
    for record in records:
        try:
            model = layout.parse_shard_key(record.source).model_id
        except ValueError:
            unattributed += record.rows
            continue
        per_model[model] = per_model.get(model, 0) + record.rows
    return per_model, unattributed


def summary(data: ReportData) -> list[dict[str, Any]]:
    """The page's first table, one row per model: versions, batches, samples, first and latest reward."""
    rows = []
    for m in data.models.values():
        first = m.rewards[0] if m.rewards else None
        last = m.rewards[-1] if m.rewards else None
        rows.append(
            {
                "model": m.model_id,
                "weight_versions": len(m.weights),
                "latest_version": m.weights[-1].version if m.weights else None,
                "batches": m.batches,
                "samples": m.samples,
                "first_version": first.version if first else None,
                "first_reward": first.mean_reward if first else None,
                "latest_sampled_version": last.version if last else None,
                "latest_reward": last.mean_reward if last else None,
                "quarantined_rows": m.quarantined_rows,
            }
        )
    return rows
