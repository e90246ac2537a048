"""`python -m benchmarks autoscale`'s arithmetic and configs, without running the three jobs (minutes each):
the pool's process-seconds from the autoscaler's record, and the variants' run configs."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from benchmarks.autoscale import CONFIG, autoscale_pool, bench_config, pool_seconds, render
from benchmarks.paced import FACTORY
from lakeflow.io import open_store
from lakeflow.lake import layout
from lakeflow.run import load_run_config

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_pool_seconds_integrates_the_pool_size_over_time() -> None:
    assert pool_seconds([(0.0, 1)], 10.0) == 10.0
    assert pool_seconds([(2.0, 1), (5.0, 3), (9.0, 2)], 10.0) == 1 * 3 + 3 * 4 + 2 * 1
    assert pool_seconds([(0.0, 2), (12.0, 1)], 10.0) == 20.0  # a change after the end adds nothing


def test_autoscale_pool_reads_the_changes_from_the_record() -> None:
    store = open_store(f"memory://{uuid.uuid4().hex}")
    ticks = [(1, 1), (3, 2), (5, 2), (7, 1), (30, 3)]  # (seconds after T0, replicas); the last is after the end
    record = {
        "started": (T0 + timedelta(seconds=0.5)).timestamp(),
        "initial": 1,
        "policy": {"min": 1},
        "ticks": [{"at": (T0 + timedelta(seconds=t)).isoformat(), "replicas": n} for t, n in ticks],
    }
    store.put(layout.autoscale_stats_key("policy"), json.dumps(record).encode())
    pool = autoscale_pool(store, "policy", T0.timestamp(), (T0 + timedelta(seconds=10)).timestamp())
    assert pool == [(0.5, 1), (3.0, 2), (7.0, 1)]


def test_bench_config_paces_every_service_and_gives_the_trainer_work() -> None:
    config = load_run_config(CONFIG)
    out = bench_config(config, 5, 6, 7, 3, 0.05, "/models/m")
    (m,) = out.models
    assert out.steps == 5 and out.autoscale is None and m.eval is None
    assert m.raas.replicas == 3 and m.raas.config.max_new_tokens == 7
    engine = m.raas.config.engine
    assert engine.type == "factory" and engine.factory == FACTORY and engine.options["pace_s_per_token"] == 0.05
    assert m.dataflow["prompts_per_step"] == 6 and m.dataflow["steps_ahead"] == 2
    assert m.trainer.model == "/models/m" and m.trainer.minibatches == 4
    plain = bench_config(config, 5, 6, 7, 1, 0.0).models[0]
    assert plain.trainer == config.models[0].trainer


def test_render_names_every_variant() -> None:
    row = {"wall_s": 10.0, "rollout_process_s": 10.0, "rollout_heartbeat_s": 9.0, "wait_fraction": 0.5}
    variants = [
        {"variant": v, **row, "wall_s_x": 1.0, "rollout_process_s_x": 1.0, "pool": [[0, 1]], "max_pool": 1}
        for v in ("fixed 1", "fixed 3", "autoscaled 1-3")
    ]
    autoscale = {"interval_s": 2.0, "confirm": 2, "cooldown_s": 8.0}
    text = render(
        {
            "steps": 5,
            "prompts_per_step": 8,
            "max_new_tokens": 8,
            "pace_s": 0.05,
            "autoscale": autoscale,
            "variants": variants,
        }
    )
    assert all(v in text for v in ("fixed 1", "fixed 3", "autoscaled 1-3")) and "50%" in text


@pytest.mark.parametrize("bad", [{"started": 0, "ticks": []}])
def test_autoscale_pool_needs_the_initial_size(bad: dict[str, object]) -> None:
    store = open_store(f"memory://{uuid.uuid4().hex}")
    store.put(layout.autoscale_stats_key("policy"), json.dumps(bad).encode())
    with pytest.raises(KeyError):
        autoscale_pool(store, "policy", 0.0, 1.0)
