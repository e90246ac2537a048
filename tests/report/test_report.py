"""The report on a lake built with lakeflow's own writers: its numbers, its files, the CLI, an empty lake."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from lakeflow.cli.report import report
from lakeflow.io import S3Options, Store, open_store
from lakeflow.lake import layout, write_samples
from lakeflow.lake.batch import BATCH_SCHEMA, write_batch
from lakeflow.lake.metrics import MetricsWriter
from lakeflow.report import write_report
from lakeflow.report.data import gather, summary
from lakeflow.report.html import PLOTS
from lakeflow.weights import publish, read_manifest
from tests.dataflow.helpers import group
from tests.weights.weight_states import adam_step, make_state

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
VERSIONS = 4
GROUPS_PER_VERSION = 2
# per model: rewards of each group of version v (mean rises with v)
REWARDS = {"alpha": lambda v: [0.1 * v, 0.1 * v + 0.2], "beta": lambda v: [0.05 * v, 0.05 * v, 0.05 * v + 0.3]}
# alpha's batches: step -> (kind, policy_version) of each row
BATCHES = {
    0: [("fresh", 0), ("fresh", 0)],
    1: [("fresh", 1), ("fresh", 0), ("replay", 0)],
    2: [("fresh", 2), ("replay", 0), ("replay", 1)],
}
WAITS = [(3.0, 1.0), (1.0, 1.0), (0.0, 2.0)]  # alpha's (wait_s, step_s) per step


def _batch_rows(rows: list[tuple[str, int]]) -> pa.Table:
    n = len(rows)
    return pa.table(
        {
            "sample_id": [f"s{i}" for i in range(n)],
            "shard": ["trajectories/x.parquet"] * n,
            "row": list(range(n)),
            "group_id": [f"g{i}" for i in range(n)],
            "prompt_id": [f"p{i}" for i in range(n)],
            "kind": [k for k, _ in rows],
            "policy_version": [v for _, v in rows],
            "reward": [0.5] * n,
            "group_mean": [0.5] * n,
            "group_std": [1.0] * n,
            "group_size": [n] * n,
        },
        schema=BATCH_SCHEMA,
    )


def build_lake(store: Store) -> None:
    """Two models over several versions; batches, weights and trainer stats for alpha only."""
    samples = []
    for model, rewards in REWARDS.items():
        for v in range(VERSIONS):
            when = T0 + timedelta(minutes=2 * v, seconds=10)  # minutes 0, 2, 4, 6: the odd ones are empty
            for _ in range(GROUPS_PER_VERSION):
                samples += group(model, rewards(v), v, created_at=when)
    commits = write_samples(store, samples, "raas")
    for step, rows in BATCHES.items():
        write_batch(store, "alpha", step, _batch_rows(rows), {})
    write_batch(store, "alpha", 3, _batch_rows([("fresh", 3), ("fresh", 0)]), {})  # served, never trained
    state = make_state(0)
    for v in range(3):
        publish(store, "alpha", state, full_every=2)
        state = adam_step(state, v)
    for step, (wait_s, step_s) in enumerate(WAITS):
        stats = {"step": step, "wait_s": wait_s, "step_s": step_s, "at": (T0 + timedelta(minutes=step)).isoformat()}
        store.put(layout.trainer_stats_key("alpha", step), json.dumps(stats).encode())
    metric_tables(store)
    autoscale_record(store, "alpha")
    assert any(c.model_id == "alpha" for c in commits)
    # a shard of alpha's that the dataflow rejected whole (it is not in the sample view), and catalog rows
    rejected = layout.shard_key("alpha", T0, "raas-bad", 0)
    for source, rows in ((rejected, 3), ("catalog", 2)):
        record = {"source": source, "rows": rows, "reason": "bad", "at": T0.isoformat(), "sample_ids": []}
        store.put(layout.quarantine_key(T0, f"{source}-{rows}"), json.dumps(record).encode())


def autoscale_record(store: Store, model_id: str) -> None:
    """What `lakeflow autoscale` records: started at 1 service, asked for 3 at minute 1, saw them live at minute 2."""
    ticks = [(0, 1, 1), (1, 3, 1), (2, 3, 3), (3, 3, 3)]  # (minute, replicas asked for, live)
    record = {
        "model_id": model_id,
        "policy": {"min": 1, "max": 4},
        "started": T0.timestamp(),
        "initial": 1,
        "ticks": [
            {"at": (T0 + timedelta(minutes=m, seconds=10)).isoformat(), "replicas": r, "live": n, "target": r}
            for m, r, n in ticks
        ],
    }
    store.put(layout.autoscale_stats_key(model_id), json.dumps(record).encode())


def metric_tables(store: Store) -> None:
    """Rows of alpha's trainer_steps, rollout_stats and eval tables (the loss/KL/entropy, rollout and eval plots)."""
    steps = MetricsWriter(store, "trainer_steps", "train-alpha")
    for step in range(len(WAITS)):
        at = T0 + timedelta(minutes=step)
        row = {"created_at": at, "model_id": "alpha", "step": step, "loss": 0.1, "kl": 0.01 * step, "entropy": 2.0}
        steps.add(row | ({"mismatch_mean": 0.01 * step, "mismatch_p99": 0.1} if step else {}))
    steps.flush()
    windows = MetricsWriter(store, "rollout_stats", "raas-1")
    for w in range(3):
        at = T0 + timedelta(minutes=w)
        row = {"created_at": at, "model_id": "alpha", "raas_id": "raas-1", "task_type": "math", "samples": 4}
        windows.add(row | {"tokens": 10 + w, "finish_stop": 3, "finish_length": 1, "finish_other": 0})
    windows.flush()
    evals = MetricsWriter(store, "eval", "eval-alpha")
    for v, p in ((0, 0.0), (2, 0.5)):
        evals.add({"model_id": "alpha", "policy_version": v, "dataset": "held", "pass_at_1": p, "reward_mean": p})
    evals.flush()
    data = gather(store).models["alpha"].curves
    assert data.steps == list(range(len(WAITS)))
    assert data.mismatch_mean == [None] + [0.01 * s for s in range(1, len(WAITS))]  # step 0: not measured
    assert data.mismatch_p99[0] is None and data.mismatch_p99[1] == 0.1
    assert data.eval == {"held": [(0, 0.0, 0.0), (2, 0.5, 0.5)]}
    assert data.finish_share["length"] == [0.25, 0.25, 0.25] and data.response_len == [2.5, 2.75, 3.0]


@pytest.fixture
def lake(tmp_path: Path) -> Store:
    store = open_store(str(tmp_path / "runs & tests" / "lake"))
    build_lake(store)
    return store


def test_steady_rate_plots_flat(tmp_path: Path) -> None:
    """One group every 6 s from 40 s past a minute: calendar-minute bins would show the first minute at
    40% of the rate; bins from the first sample, divided by their real duration, stay within 15%."""
    store = open_store(str(tmp_path / "lake"))
    start = T0 + timedelta(seconds=40)
    samples = []
    for k in range(100):
        samples += group("alpha", [0.0, 1.0], 0, created_at=start + timedelta(seconds=6 * k))
    write_samples(store, samples, "raas")
    rates = gather(store).models["alpha"].rate_per_min
    assert len(rates) == 10
    assert max(rates) / min(rates) < 1.15, rates
    assert rates[0] == pytest.approx(20.0)


def test_numbers(lake: Store) -> None:
    data = gather(lake)
    assert list(data.models) == ["alpha", "beta"]
    for model, rewards in REWARDS.items():
        got = data.models[model].rewards
        assert [r.version for r in got] == list(range(VERSIONS))
        for r in got:
            assert r.mean_reward == pytest.approx(sum(rewards(r.version)) / len(rewards(r.version)))
            assert r.samples == GROUPS_PER_VERSION * len(rewards(r.version))
        assert data.models[model].samples == sum(r.samples for r in got)
        # 2 groups at minutes 0, 2, 4, 6 (+10 s), nothing in between; bins start at the first sample,
        # and the last (empty-length) bin joins the one before it.
        per_minute = GROUPS_PER_VERSION * len(rewards(0))
        assert data.models[model].rate_per_min == [per_minute, 0, per_minute, 0, per_minute, per_minute]
        start = T0.timestamp() + 10
        assert data.models[model].rate_edges_s == [start + 60 * i for i in range(6)] + [start + 360]
    alpha, beta = data.models["alpha"], data.models["beta"]
    # step 3's batch was written ahead of the trainer (no heartbeat, LATEST is 2): not trained, not counted
    assert alpha.batches == 4 and beta.batches == 0
    assert sorted(alpha.staleness["fresh"]) == [0, 0, 0, 0, 1]
    assert sorted(alpha.staleness["replay"]) == [1, 1, 2]
    assert beta.staleness == {}
    assert [w.version for w in alpha.weights] == [0, 1, 2] and beta.weights == []
    for w in alpha.weights:
        manifest = read_manifest(lake, "alpha", w.version)
        assert w.delta_bytes == (manifest.delta.size if manifest.delta else None)
        assert w.kind == manifest.kind and w.sparsity == manifest.sparsity
    assert alpha.weights[0].delta_bytes is None and alpha.weights[1].delta_bytes
    assert [s.wait_fraction for s in alpha.trainer] == [0.75, 0.5, 0.0]
    assert alpha.quarantined_rows == 3 and beta.quarantined_rows == 0 and data.quarantined_unattributed == 2
    first = summary(data)[0]
    assert first["model"] == "alpha" and first["weight_versions"] == 3 and first["latest_version"] == 2
    assert first["first_reward"] == pytest.approx(0.1) and first["latest_reward"] == pytest.approx(0.4)
    assert data.notes == []


def test_page_and_pngs(lake: Store, tmp_path: Path) -> None:
    out = tmp_path / "out"
    page = write_report(lake, out)
    text = page.read_text()
    linked = set(re.findall(r'<img src="([^"]+)"', text))
    pngs = {p.name for p in out.glob("*.png")}
    assert linked == pngs == {p.file for p in PLOTS}
    for name in pngs:
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, name
    assert text.count('class="caption"') == len(PLOTS) and "No data yet" not in text
    # the lake URL has '&' in it: escaped everywhere, never raw
    assert "runs &amp; tests" in text and "runs & tests" not in text


def test_empty_lake_through_cli(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "reward.png").write_bytes(b"an earlier report's plot")
    # A lake with nothing committed: only a crashed writer's orphan shard.
    open_store(str(tmp_path / "empty")).put("trajectories/model=a/date=2026-01-05/w-00000000.parquet", b"PAR1")
    result = CliRunner().invoke(report, ["--lake", str(tmp_path / "empty"), "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"report: {out / 'index.html'}" in result.output
    text = (out / "index.html").read_text()
    assert text.count("No data yet") == len(PLOTS) + 1  # every plot and the summary
    assert "<img" not in text and list(out.glob("*.png")) == []  # the stale plot is gone


def test_cli_on_a_lake(lake: Store, tmp_path: Path) -> None:
    out = tmp_path / "new" / "dir"
    result = CliRunner().invoke(report, ["--lake", lake.url, "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert len(list(out.glob("*.png"))) == len(PLOTS) and (out / "index.html").exists()


@pytest.mark.s3
def test_report_of_an_s3_lake(s3_url: str, s3_endpoint: str, tmp_path: Path) -> None:
    store = open_store(s3_url, S3Options(endpoint_url=s3_endpoint))
    build_lake(store)
    data = gather(store)
    assert [r.mean_reward for r in data.models["alpha"].rewards] == pytest.approx([0.1, 0.2, 0.3, 0.4])
    args = ["--lake", s3_url, "--endpoint-url", s3_endpoint, "--out", str(tmp_path / "out")]
    result = CliRunner().invoke(report, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert len(list((tmp_path / "out").glob("*.png"))) == len(PLOTS)
