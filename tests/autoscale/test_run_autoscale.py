"""`lakeflow run --autoscale` end to end: the tiny loop starts with one rollout service, the autoscaler
grows the pool to two while the trainer waits, shrinks it back to one once the trainer is the bottleneck,
and at the end drains what is left; nothing a service generated is lost and no claim is left behind by a
removed service.

Why neither change is a race: the trainer's first step waits for the first rollouts (a service has to
start, load the model and generate before batch 0 exists), so the first observed wait fraction is far
above 10% on any machine. After that the job is trainer-bound by construction: one generated token per
sample, while the trainer's loss waits 0.3 s per microbatch (tests/autoscale/paced_loss.py: about 5 s a
step, where two services make a step's 32 samples in a fraction of that even on a loaded machine), with
batches served two steps ahead, so the trainer stops waiting (0% measured) and the rule shrinks the pool.
(The torch work alone did not do it: with one thread per process a step of this model takes about the time
a loaded machine's services take for its samples.) Every recorded decision is also replayed through
`decide`, so the test checks what was decided against the rule, not against timings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lakeflow.autoscale.rule import Observation, Policy, State, decide
from lakeflow.io import open_store
from lakeflow.lake import layout
from lakeflow.lakeview import connect_lake
from lakeflow.models.tiny import build_tiny_model
from lakeflow.weights.manifest import read_latest

pytest.importorskip("torch")

STEPS = 6
ROOT = Path(__file__).resolve().parents[2]


def config(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    if not model.exists():
        build_tiny_model(model, hidden=128, layers=4)
    run = {
        "name": "auto",
        "steps": STEPS,
        "models": [
            {
                "id": "policy",
                "dataflow": {
                    "vocab_size": 512,
                    "n_samples": 4,
                    "prompts_per_step": 8,
                    "max_staleness": 4,
                    "steps_ahead": 2,
                    "dataset": {"type": "synthetic", "prompts": 100},
                },
                "trainer": {
                    "model": str(model),
                    "lr": 1e-3,
                    "minibatches": 4,
                    "max_tokens_per_microbatch": 64,
                    "loss": {"type": "function", "function": "tests.autoscale.paced_loss:paced_grpo"},
                },
                "raas": {
                    "replicas": 1,
                    "config": {"max_new_tokens": 1, "poll_s": 0.1, "heartbeat_s": 1, "engine": {"type": "hf"}},
                },
            }
        ],
        "loop": {"poll_s": 0.1, "max_poll_s": 0.4, "checkpoint_s": 2, "lease_ttl_s": 30},
        "autoscale": {"min": 1, "max": 2, "interval_s": 1, "cooldown_s": 2, "confirm": 1, "window_s": 4},
    }
    run["models"][0]["trainer"] |= {"poll_s": 0.1, "max_poll_s": 0.5}  # type: ignore[index]
    run["models"][0]["raas"]["config"]["engine"]["threads"] = 1  # type: ignore[index]
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(run))
    return path


# Over 60 s (~70 s): the pool must grow (the trainer waits), then shrink (it stops waiting), each after the
# controller's confirming ticks, and the run must end with both services drained.
@pytest.mark.slow
@pytest.mark.timeout(900)
# untraced: the services and the controller are measured in process
# (tests/autoscale/test_controller.py, test_actuators.py, tests/raas, tests/trainer)
@pytest.mark.usefixtures("untraced_children")
def test_run_autoscale_grows_and_shrinks_the_pool_and_drains_it_without_loss(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "lakeflow", "run", str(config(tmp_path)), "--run-dir", str(run_dir)]
    path = os.environ.get("PYTHONPATH")  # the trainer imports its loss from this checkout's tests/
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT)}
    done = subprocess.run(cmd, capture_output=True, timeout=600, env=env)  # a guard against a hang
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    store = open_store(str(run_dir / "lake"))
    assert read_latest(store, "policy")[0].version == STEPS  # type: ignore[index]

    # the pool grew from 1 to 2, then shrank to 1; each decision is the rule's on its recorded inputs
    record = json.loads(store.get(layout.autoscale_stats_key("policy")))
    assert record["initial"] == 1
    sizes = [t["replicas"] for t in record["ticks"]]
    assert 2 in sizes and 1 in sizes[sizes.index(2) :], sizes
    reasons = [t["reason"] for t in record["ticks"]]
    assert any(r.startswith("grow") for r in reasons) and any(r.startswith("shrink") for r in reasons)
    policy, state = Policy(**record["policy"]), State(last_change=record["started"])
    for tick in record["ticks"]:
        replay = decide(Observation(**tick["observation"]), policy, state)
        assert replay.replicas == tick["replicas"] and replay.reason == tick["reason"]
        state = replay.state
    log = (run_dir / "logs" / "autoscale.log").read_text()
    assert "started raas-policy-1" in log
    shrunk, end = log.index("2 -> 1 rollout services"), log.index("drained raas-policy-0")
    assert shrunk < log.index("drained raas-policy-1: exit 0") < end  # the shrink drained it, not the end
    assert "drained raas-policy-0: exit 0" in log

    # nothing lost: every sample a service counted is in the lake; no group abandoned
    beats = [json.loads(store.get(i.key)) for i in store.list(layout.RAAS_STATS)]
    assert all(b["state"] == "stopped" and b["abandoned"] == 0 for b in beats)
    lake = connect_lake(store)
    rows = lake.sql("SELECT count(*) AS n FROM trajectories").to_pylist()[0]["n"]
    assert rows == sum(b["samples"] for b in beats) > 0
    # no orphaned claim: any claim still in the lake is for a group that was committed
    groups = set(lake.sql("SELECT DISTINCT group_id FROM trajectories").column("group_id").to_pylist())
    claims = [i.key for i in store.list(layout.tasks_prefix("policy")) if i.key.endswith(".claim")]
    assert {Path(k).name.removesuffix(".claim") for k in claims} <= groups


def test_an_autoscaled_run_starts_the_autoscaler_instead_of_its_pools(tmp_path: Path) -> None:
    from lakeflow.run import Launcher, load_run_config

    run_config = load_run_config(config(tmp_path))
    launcher = Launcher(run_config, open_store(str(tmp_path / "lake")), str(tmp_path / "lake"), tmp_path / "run")
    names = [c.name for c in launcher.plan()]
    assert names == ["dataflow", "train-policy", "autoscale"]
    argv = launcher.plan()[-1].argv
    assert argv[3:4] == ["autoscale"] and argv[argv.index("--actuator") + 1] == "local"
    assert argv[argv.index("--min") + 1 : argv.index("--min") + 4] == ["1", "--max", "2"]
    assert load_run_config(argv[argv.index("--config") + 1]) == run_config  # the run's config, round-tripped
    plain = Launcher(run_config.model_copy(update={"autoscale": None}), launcher.store, "x", tmp_path / "plain")
    assert [c.name for c in plain.plan()] == ["dataflow", "train-policy", "raas-policy-0"]
