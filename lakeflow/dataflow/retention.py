"""Retention: what the lake may forget, and nothing that a snapshot, a batch or a resume still needs.

Four kinds of objects go (a plan first; deleted only with `apply`):
- orphan shards (no commit record) whose date partition ended more than `orphan_grace` ago;
- compacted sources — commit records and their shards — covered by a table version committed more
  than `source_grace` ago (a reader that loaded an older version may still read them until then),
  and never one the catalog's pools (pending, fresh, replay) or a batch a trainer has not consumed
  yet (steps from the model's newest published version on) names: batches reference shards by key;
- optimizer checkpoints `checkpoints/<model>/<version>/` beyond the newest `keep_checkpoints`, never
  the newest published version's (the one a resume loads) nor any newer one;
- quarantine records older than `quarantine_days` whose effect the table already holds (applied,
  and their shards compacted), plus table data files no version inside `source_grace` needs.

Nothing is deleted on the table's word alone: the committer records the SHA-256 of every log entry it
writes (`written`, the catalog's `table_log`), and only a watermark of such an entry covers sources.
A log entry after its first recorded one that it did not write, or one changed since (a forged
watermark, add or remove), is reported (`kept`, UNTRUSTED) and not obeyed; while one is in the log,
neither quarantine records nor table files (vacuum) are collected, since both judge by the log's newest
state. Versions before the first record (one-shot compactions) cover no sources.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc

from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.lake.batch import list_batch_steps, read_batch
from lakeflow.lake.commit import MAX_COMMIT_BYTES
from lakeflow.lake.quarantine import QuarantineRecord
from lakeflow.lake.table import history, log_entry_sha256, log_versions, read_snapshot, vacuum
from lakeflow.weights.manifest import latest_version

UNTRUSTED = "table log entry the dataflow did not write (or changed since): reported, not obeyed"
MAX_FUTURE = timedelta(minutes=10)  # a commit may be stamped this far ahead of the dataflow's clock (reader)


@dataclass(frozen=True)
class RetentionPolicy:
    """How long each kind of object is kept."""

    orphan_grace: timedelta = timedelta(days=2)
    source_grace: timedelta = timedelta(hours=1)
    keep_checkpoints: int = 3
    quarantine_days: float = 30.0


@dataclass
class GcPlan:
    """Keys to delete (in this order: commit records before their shards) and what was kept and why."""

    delete: list[tuple[str, str]] = field(default_factory=list)  # (key, why)
    kept: list[tuple[str, str]] = field(default_factory=list)  # (key or kind, why)
    table_files: list[str] = field(default_factory=list)  # data files vacuum removes

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for _, why in self.delete:
            out[why] += 1
        if self.table_files:
            out["table files no version needs"] = len(self.table_files)
        return dict(out)


def referenced_shards(store: Store, pools: Iterable[str] = ()) -> set[str]:
    """Shards a trainer may still read: those the catalog's pools name (`pools`, from the caller) and
    those named by every batch from each model's newest published version on (the trainer holding
    version N trains batch N; batches before it were consumed)."""
    keep = set(pools)
    models = {info.key.split("/")[1] for info in store.list(layout.batches_root()) if info.key.count("/") >= 2}
    for model in sorted(models):
        try:
            consumed = latest_version(store, model)
        except ValueError:
            continue  # not a model name: nothing of ours
        for step in list_batch_steps(store, model, after=consumed - 1 if consumed else None):
            table, _ = read_batch(store, model, step)
            keep.update(table.column("shard").to_pylist())
    return keep


def plan_gc(
    store: Store,
    policy: RetentionPolicy,
    protected: set[str],
    ingested_before: str | None,
    now: datetime | None = None,
    quarantine: list[QuarantineRecord] | None = None,
    written: dict[int, str] | None = None,
) -> GcPlan:
    """What retention would delete now. `protected`: shard keys that must stay (`referenced_shards`);
    `ingested_before`: a commit key the dataflow has ingested everything before (None: no dataflow has
    served the lake, so compacted sources stay for the one that will); `written`: the table versions the
    committer wrote, with the SHA-256 of each log entry (None or empty: no record, sources stay)."""
    now = now or datetime.now(UTC)
    plan = GcPlan()
    trusted, untrusted = _judge_log(store, written or {})
    plan.kept += [(layout.table_log_key(v), UNTRUSTED) for v in untrusted]
    shards = {}
    for info in store.list(layout.TRAJECTORIES):
        try:
            parsed = layout.parse_shard_key(info.key)
        except ValueError:
            continue
        shards[(parsed.writer_id, parsed.seq)] = (info.key, parsed.date)
    commits = {}
    for info in store.list(layout.COMMITS):
        try:
            parsed_commit = layout.parse_commit_key(info.key)
        except ValueError:
            continue
        commits[(parsed_commit.writer_id, parsed_commit.seq)] = (info.key, info.size)
    _plan_sources(store, policy, protected, ingested_before, now, shards, commits, plan, trusted)
    for ident, (key, day) in sorted(shards.items()):
        if ident in commits:
            continue
        ended = datetime.combine(date.fromisoformat(day), datetime.min.time(), UTC) + timedelta(days=1)
        if key in protected:
            plan.kept.append((key, "orphan shard named by a batch or the catalog"))
        elif now - ended > policy.orphan_grace:
            plan.delete.append((key, "orphan shard (no commit record)"))
    _plan_checkpoints(store, policy, plan)
    if not untrusted:
        _plan_quarantine(store, policy, now, quarantine, plan)
        plan.table_files = vacuum(store, policy.source_grace, apply=False)
    return plan


def _judge_log(store: Store, written: dict[int, str]) -> tuple[set[int], list[int]]:
    """Versions in the log whose entry is byte for byte what the committer wrote, and the others from
    its first recorded version on. Versions before any record (a one-shot `lakeflow lake compact`, a lake
    older than the record) are neither: their watermarks are not obeyed, and they are not reported."""
    trusted, untrusted = set(), []
    first = min(written, default=None)
    for version in log_versions(store):
        if first is None or version < first:
            continue
        digest = log_entry_sha256(store, version)
        if digest is None:
            continue  # expired from the log meanwhile
        if written.get(version) == digest:
            trusted.add(version)
        else:
            untrusted.append(version)
    return trusted, untrusted


def _plan_sources(
    store: Store,
    policy: RetentionPolicy,
    protected: set[str],
    ingested_before: str | None,
    now: datetime,
    shards: dict[tuple[str, int], tuple[str, str]],
    commits: dict[tuple[str, int], tuple[str, int]],
    plan: GcPlan,
    trusted: set[int],
) -> None:
    """Commit records (and their shards) at or before the watermark of the newest table version older
    than the grace period that the committer wrote, and before what the dataflow has ingested."""
    if ingested_before is None:
        plan.kept.append(("compacted sources", "no dataflow checkpoint: kept for the dataflow that will ingest"))
        return
    if not trusted:
        plan.kept.append(("compacted sources", "no table version recorded by the dataflow: kept"))
        return
    settled = [c for c in history(store) if c.at <= now - policy.source_grace and c.version in trusted]
    watermark = next((c.watermark for c in settled if c.watermark), None)
    if watermark is None:
        return
    for ident, (key, size) in sorted(commits.items(), key=lambda item: item[1][0]):
        if key > watermark or key >= ingested_before:
            continue
        shard = shards.get(ident)
        if shard is not None and shard[0] in protected:
            plan.kept.append((shard[0], "compacted, but a batch or the catalog still names it"))
            continue
        plan.delete.append((key, "compacted commit record" if size <= MAX_COMMIT_BYTES else "refused commit record"))
        if shard is not None:
            plan.delete.append((shard[0], "compacted shard"))
            shards.pop(ident)
    # `shards` now holds what stays; its orphans are judged by the caller, the compacted ones are gone.


def _plan_checkpoints(store: Store, policy: RetentionPolicy, plan: GcPlan) -> None:
    by_model: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for info in store.list(layout.checkpoints_root()):
        parsed = layout.parse_checkpoint_key(info.key)
        if parsed is not None:
            by_model[parsed[0]][parsed[1]].append(info.key)
    for model, versions in sorted(by_model.items()):
        resume = latest_version(store, model)
        newest = sorted(versions, reverse=True)[: policy.keep_checkpoints]
        for version, keys in sorted(versions.items()):
            if version in newest or resume is None or version >= resume:
                continue  # the newest K, the one a resume loads, and any not yet published
            plan.delete += [(key, "optimizer checkpoint beyond the newest kept") for key in keys]


def _plan_quarantine(
    store: Store, policy: RetentionPolicy, now: datetime, records: list[QuarantineRecord] | None, plan: GcPlan
) -> None:
    """A record goes when it is old, the table has applied it, and every shard it can name is compacted:
    it was written after those shards were ingested, so they were stamped before `at` + MAX_FUTURE."""
    snap = read_snapshot(store)
    if snap.watermark is None or snap.quarantine_at is None:
        return
    covered = layout.parse_commit_key(snap.watermark).when
    old = now - timedelta(days=policy.quarantine_days)
    for info in store.list(layout.QUARANTINE):
        try:
            record = QuarantineRecord.model_validate_json(store.get(info.key))
        except (FileNotFoundError, ValueError):
            continue
        if record.at < old and record.at <= snap.quarantine_at and record.at + MAX_FUTURE < covered:
            plan.delete.append((info.key, f"quarantine record older than {policy.quarantine_days:g} days"))
    del records


def apply_gc(store: Store, plan: GcPlan, policy: RetentionPolicy) -> int:
    """Delete what `plan` lists (commit records before their shards: a crash in between leaves an orphan,
    never a commit without its shard) and vacuum the table; returns how many objects went."""
    for key, _ in plan.delete:
        store.delete(key)
    removed = vacuum(store, policy.source_grace, apply=True) if plan.table_files else []
    return len(plan.delete) + len(removed)


def pool_shards(tables: dict[str, pa.Table], replay_models: set[str] | None = None) -> set[str]:
    """Shard keys named by the catalog's pools (pending, fresh, replay), given its `shards`, `pending`,
    `fresh` and `replay` tables (the live catalog's or a checkpoint's). Served groups stay in the replay
    pool even for a model that never replays: `replay_models` (None: every model) names those whose
    replay pool may still be drawn from."""
    shards = tables.get("shards")
    if shards is None or shards.num_rows == 0:
        return set()
    index = dict(zip(shards.column("shard_idx").to_pylist(), shards.column("shard").to_pylist(), strict=True))
    named: set[str] = set()
    for name in ("pending", "fresh", "replay"):
        table = tables.get(name)
        if table is None or "shard_idx" not in table.column_names:
            continue
        if name == "replay" and replay_models is not None:
            table = table.filter(pc.is_in(table.column("model_id"), pa.array(sorted(replay_models), pa.string())))
        for idxs in table.column("shard_idx").to_pylist():
            named.update(index[i] for i in idxs or [] if i in index)
    return named
