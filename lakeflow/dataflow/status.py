"""`lakeflow status`: one screen per lake, from the newest catalog checkpoint and live objects.

Works whether or not a dataflow process is serving: counts come from the checkpoint (at
most `checkpoint_s` old, its age is shown), weights, tasks, heartbeats and the balance
report are read live, and commits not yet in the checkpoint are counted from the listing.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakeflow.catalog.stats import recent_counts, starvation
from lakeflow.dataflow.checkpoint import load_manifest
from lakeflow.errors import LakeflowError
from lakeflow.io import Store
from lakeflow.lake import CommitCursor, LakeReader, layout
from lakeflow.lake import tasks as lake_tasks
from lakeflow.lake.heartbeats import JudgeCounts, production, read_heartbeats
from lakeflow.text import text_table
from lakeflow.weights.manifest import latest_version


def checkpoint_tables(store: Store, attempts: int = 5) -> tuple[dict[str, pa.Table], dict[str, Any] | None]:
    """The tables of the newest catalog checkpoint (without internal columns), and its manifest.
    `sample_hashes` is left out: it is only for duplicate detection and the largest table.

    During a run the dataflow process writes a new checkpoint every few seconds and deletes the
    superseded copies of the mutable tables: a part that vanishes mid-read means a newer
    checkpoint exists, so the read starts again from the new manifest."""
    for _ in range(attempts):
        manifest = load_manifest(store)
        if manifest is None:
            return {}, None
        try:
            return _read_parts(store, manifest), manifest
        except FileNotFoundError:
            continue
    raise LakeflowError(
        f"the catalog checkpoint changed under {attempts} reads in a row; try again (is the dataflow process "
        "checkpointing continuously? see loop.checkpoint_s)"
    )


def _read_parts(store: Store, manifest: dict[str, Any]) -> dict[str, pa.Table]:
    tables = {}
    for name, keys in manifest["parts"].items():
        if name == "sample_hashes":
            continue
        parts = [pq.read_table(io.BytesIO(store.get(key))) for key in keys]
        if parts:
            table = pa.concat_tables(parts)
            tables[name] = table.drop_columns([c for c in table.column_names if c.startswith("_")])
    return tables


def lake_status(store: Store) -> dict[str, Any]:
    """Per model: weights version, pool counts, tasks, trainer wait; plus RaaS heartbeats and what each
    rollout service and each pool (model, region) has produced (`rollout_services`, `rollout_pools`)."""
    tables, manifest = checkpoint_tables(store)

    def count(table: str, model_id: str, where: Callable[[pa.Table], pa.ChunkedArray] | None = None) -> int:
        """Rows of checkpoint table `table` of the model (and matching `where`, when given)."""
        if table not in tables:
            return 0
        rows = tables[table]
        mask = pc.equal(rows.column("model_id"), model_id)
        return int(rows.filter(mask if where is None else pc.and_(mask, where(rows))).num_rows)

    models = sorted(
        {i.key.split("/")[1] for i in store.list("batches/")}
        | {i.key.split("/")[1] for i in store.list("tasks/")}
        | {i.key.split("/")[1] for i in store.list("weights/")}
        | {i.key.split("=")[1].split("/")[0] for i in store.list("trajectories/model=")}
    )
    now = datetime.now(UTC)
    report: dict[str, Any] = {"lake": store.url, "at": now.isoformat(), "models": {}}
    # Committed samples = those in the checkpoint + those of commits it does not hold yet (all of
    # them when no dataflow process has checkpointed, e.g. a lake written by `lakeflow synth`).
    cursor = CommitCursor.from_json(manifest["cursor"]) if manifest is not None else None
    newer = LakeReader(store).poll(cursor).commits
    report["checkpoint"] = manifest["seq"] if manifest is not None else None
    report["commits_after_checkpoint"] = len(newer)
    uningested: dict[str, int] = {}
    for _, record in newer:
        uningested[record.model_id] = uningested.get(record.model_id, 0) + record.rows
    recent = _recent(tables.get("groups"))
    for m in models:
        latest = latest_version(store, m)
        open_ids, claimed = lake_tasks.list_tasks(store, m)
        report["models"][m] = {
            "weights_version": latest,
            "batches": count("batches", m),
            "fresh_groups": count("fresh", m),
            "replay_groups": count("replay", m),
            "incomplete_groups": count("pending", m),
            "stale_groups": count("dropped", m, lambda t: pc.starts_with(t.column("reason"), "stale")),
            "filtered_groups": count("groups", m, lambda t: pc.invert(t.column("kept"))),
            "samples": _sum(tables.get("shards"), m) + uningested.get(m, 0),
            "samples_not_ingested": uningested.get(m, 0),
            "tasks_open": len(open_ids - claimed),
            "tasks_claimed": len(open_ids & claimed),
        } | recent.get(m, {})
        report["models"][m]["starving"] = starvation(report["models"][m])
    report["quarantined_rows"] = (
        int(tables["quarantine"].column("rows").to_numpy().sum()) if "quarantine" in tables else 0
    )
    report["balance"] = _balance(store)
    heartbeats = read_heartbeats(store)
    report["raas"] = heartbeats
    made = production(heartbeats, now, {m: r["weights_version"] for m, r in report["models"].items()})
    report["rollout_services"] = [asdict(r) for r in made.services]
    report["rollout_pools"] = [asdict(r) for r in made.pools]
    return report


def _recent(groups: pa.Table | None) -> dict[str, dict[str, int]]:
    """The starvation window's numbers per model (catalog/stats.py) from the checkpoint's groups."""
    if groups is None:
        return {}
    columns = ["model_id", "arrival", "kept", "zero_adv", "reward_mean"]
    return recent_counts(zip(*(groups.column(c).to_pylist() for c in columns), strict=True))


def _balance(store: Store) -> dict[str, Any] | None:
    """The newest balance report, or None."""
    try:
        report: dict[str, Any] = json.loads(store.get(layout.BALANCE_REPORT))
    except (FileNotFoundError, ValueError):
        return None
    return report


def _sum(shards: pa.Table | None, model_id: str) -> int:
    if shards is None:
        return 0
    mask = pc.equal(shards.column("model_id"), model_id)
    return int(pc.sum(pc.filter(shards.column("rows"), mask)).as_py() or 0)


def render_status(report: dict[str, Any]) -> str:
    """The report as a short text screen."""
    lines = [
        f"lake {report['lake']}  (checkpoint {report['checkpoint'] if report['checkpoint'] is not None else 'none'}, "
        f"{report['commits_after_checkpoint']} commits not in it)"
    ]
    cols = [
        "model",
        "weights",
        "batches",
        "fresh",
        "replay",
        "pending",
        "stale",
        "filtered",
        "samples",
        "tasks",
        "claimed",
    ]
    keys = [
        "weights_version",
        "batches",
        "fresh_groups",
        "replay_groups",
        "incomplete_groups",
        "stale_groups",
        "filtered_groups",
        "samples",
        "tasks_open",
        "tasks_claimed",
    ]
    rows = [[m] + [str(v[k]) if v[k] is not None else "-" for k in keys] for m, v in report["models"].items()]
    lines += text_table(cols, rows)
    for m, v in report["models"].items():
        if v.get("starving"):
            lines.append(f"{m}: the trainer starves: {v['starving']}")
    lines.append(f"quarantined rows: {report['quarantined_rows']}")
    b = report.get("balance")
    if b:
        wait = "unknown" if b["trainer_wait_fraction"] is None else f"{b['trainer_wait_fraction']:.0%}"
        lines.append(
            f"balance ({b['window_s']:.0f} s window): trainer wait {wait}, produced {b['produced']}, "
            f"consumed {b['consumed']}, rollout services {b['raas']} -> target {b['target_raas']}"
        )
    lines += render_production(report.get("rollout_services", []), report.get("rollout_pools", []))
    return "\n".join(lines)


def render_production(services: list[dict[str, Any]], pools: list[dict[str, Any]]) -> list[str]:
    """Per rollout service, then per pool: what each has produced; '-' for what its heartbeat lacks."""
    if not services:
        return []
    lines = ["rollout services (tokens/s while generating; samples/s over the service's life)"]
    cols = ["id", "model", "region", "state", "seen", "groups", "samples", "tokens/s", "samples/s", "share", "version"]
    rows = [
        [
            _show(s["raas_id"]),
            _show(s["model_id"]),
            _show(s["region"]),
            _show(s["state"]),
            _show(s["age_s"], "{:.0f} s ago"),
            _show(s["groups"]),
            _show(s["samples"]),
            _show(s["tokens_per_s"], "{:.1f}"),
            _show(s["samples_per_s"], "{:.2f}"),
            _show(s["share"], "{:.0%}"),
            _show(s["weights_version"]),
        ]
        for s in services
    ]
    lines += ["  " + line for line in text_table(cols, rows)]
    lines.append(
        "rollout pools (samples/s summed over live services; lag: versions behind the model's newest; "
        "pulled: weight bytes fetched; failed: episodes whose agent or environment failed, most frequent end"
        + ("; judge: groups held now, unusable replies, errors, most frequent reason" if _judged(pools) else "")
        + ")"
    )
    cols = ["model", "region", "live/total", "groups", "samples", "samples/s", "versions", "lag", "pulled", "failed"]
    cols += ["judge"] if _judged(pools) else []
    rows = [
        [
            _show(p["model_id"]),
            _show(p["region"]),
            f"{p['live']}/{p['services']}",
            str(p["groups"]),
            str(p["samples"]),
            f"{p['samples_per_s']:.2f}",
            _versions(p.get("oldest_version"), p.get("newest_version")),
            _show(p.get("version_lag")),
            _megabytes(p.get("pulled_bytes")),
            _failed(p.get("failed_episodes"), p.get("top_failure")),
            *([_judge(p.get("judge"))] if _judged(pools) else []),
        ]
        for p in pools
    ]
    lines += ["  " + line for line in text_table(cols, rows)]
    return lines


def _judged(pools: list[dict[str, Any]]) -> bool:
    return any(p.get("judge") for p in pools)


def _judge(counts: dict[str, Any] | None) -> str:
    """A pool's judge: 'held 3, unusable 700, errors 6 (no-score: 700)', '-' when nothing failed."""
    if not counts:
        return "-"
    line = JudgeCounts(**counts).summary()
    failing = counts.get("failing_s")
    return line if failing is None else f"{line}; every request failing for {failing / 60:.0f} min"


def _failed(n: int | None, top: str | None) -> str:
    return "-" if not n else f"{n} ({top})" if top else str(n)


def _megabytes(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e6:,.1f} MB"


def _versions(oldest: int | None, newest: int | None) -> str:
    if oldest is None or newest is None:
        return "-"
    return str(oldest) if oldest == newest else f"{oldest}-{newest}"


def _show(value: Any, fmt: str = "{}") -> str:
    return "-" if value is None else fmt.format(value)
