"""Two models trained at once (solve_verify): one rollout pool hosts both, each sample reaches only its
own model's batches, masks hide the other role's tokens, staleness holds per model, and a dead
verifier trainer (kill -9) does not stop the solver's training."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from lakeflow.io import Store, open_store
from lakeflow.lake.batch import list_batch_steps, read_batch
from lakeflow.lakeview import connect_lake
from lakeflow.run import Launcher
from lakeflow.run.config import RunConfig
from lakeflow.weights.manifest import read_latest

pytest.importorskip("torch")
MAX_STALENESS = 2


def model(model_id: str, cache: Path, dataset: dict[str, object] | None, replicas: int) -> dict[str, object]:
    pool = {
        "workflow": "solve_verify",
        "roles": {"solver": "solver", "verifier": "verifier"},
        "max_new_tokens": 4,
        "poll_s": 0.1,
        "heartbeat_s": 1,
        "engine": {"type": "hf", "threads": 1},
    }
    return {
        "id": model_id,
        "dataflow": {
            "vocab_size": 512,
            "n_samples": 2,
            "prompts_per_step": 2,
            "max_staleness": MAX_STALENESS,
            "steps_ahead": 1,
            "dataset": dataset,
        },
        "trainer": {"model": f"tiny:{model_id}", "model_cache_dir": str(cache), "lr": 1e-3, "poll_s": 0.1},
        "raas": {"replicas": replicas, "config": pool if replicas else {}},
    }


def config(tmp_path: Path, steps: int) -> RunConfig:
    cache = tmp_path / "models"
    return RunConfig.model_validate(
        {
            "name": "multi",
            "steps": steps,
            "models": [
                model("solver", cache, {"type": "synthetic", "prompts": 50}, 1),
                model("verifier", cache, None, 0),
            ],
            "loop": {"poll_s": 0.1, "max_poll_s": 0.4, "checkpoint_s": 2, "lease_ttl_s": 30},
        }
    )


def version(store: Store, model_id: str) -> int:
    latest = read_latest(store, model_id)
    return -1 if latest is None else latest[0].version


def wait_until(launcher: Launcher, done: object, what: str, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():  # type: ignore[operator]
        outcome = launcher.poll()
        assert outcome is None or outcome == "done", outcome
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_multi_policy_config_errors() -> None:
    bad = {
        "name": "bad",
        "steps": 1,
        "models": [model("solver", Path("/tmp"), {"type": "synthetic", "prompts": 5}, 1)],
    }
    with pytest.raises(ValueError, match="'verifier', which is not in models"):
        RunConfig.model_validate(bad)
    bad["models"].append(model("verifier", Path("/tmp"), None, 1))  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="no dataset, so it issues no tasks"):
        RunConfig.model_validate(bad)


@pytest.mark.slow
def test_two_models_route_mask_stale_and_survive_a_dead_trainer(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    store = open_store(lake)
    launcher = Launcher(config(tmp_path, 1000), store, lake, tmp_path / "run")
    launcher.start()
    try:
        wait_until(launcher, lambda: version(store, "solver") >= 2 and version(store, "verifier") >= 2, "both at v2")
        victim = next(c for c in launcher.components if c.name == "train-verifier")
        assert victim.process is not None
        os.kill(victim.process.pid, signal.SIGKILL)
        victim.process.wait()
        launcher.components.remove(victim)  # expected death: the launcher would otherwise stop the run
        assert victim.log is not None
        victim.log.close()
        frozen, solver_then = version(store, "verifier"), version(store, "solver")
        wait_until(launcher, lambda: version(store, "solver") >= solver_then + 3, "the solver to go on alone")
        assert version(store, "verifier") == frozen  # nobody trains the verifier, and the solver did not wait
    finally:
        launcher.stop()

    view = connect_lake(store)
    rows = {r["sample_id"]: r for r in view.sql("SELECT * FROM trajectories").to_pylist()}
    for model_id in ("solver", "verifier"):
        steps = list_batch_steps(store, model_id)
        assert steps, model_id
        for step in steps:
            table, _ = read_batch(store, model_id, step)
            for ref in table.to_pylist():
                sample = rows[ref["sample_id"]]
                assert sample["model_id"] == model_id == sample["role"]  # routed by role, never crossed
                assert step - sample["policy_version"] <= MAX_STALENESS  # staleness per model
    episodes: dict[str, dict[str, dict[str, object]]] = {}
    for sample in rows.values():
        extra = json.loads(sample["extra"])
        assert set(extra["versions"]) == {"solver", "verifier"}
        assert extra["versions"][sample["model_id"]] == sample["policy_version"]
        episodes.setdefault(sample["episode_id"], {})[sample["role"]] = sample
        mask, logp = sample["loss_mask"], sample["response_logprobs"]
        assert all(lp == 0.0 for m, lp in zip(mask, logp, strict=True) if m == 0)
        if sample["role"] == "verifier" or not extra.get("retried"):
            assert all(m == 1 for m in mask)  # one turn, all its own
        else:
            assert 0 in mask and mask[0] == 1 and mask[-1] == 1  # answer, masked feedback turn, answer again
    assert all(set(e) == {"solver", "verifier"} for e in episodes.values())  # one sample per role per episode
