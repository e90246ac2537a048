"""A tiny run under a real Slurm (Debian's slurm-wlm on this machine): `lakeflow launch --target slurm`
renders it, `sbatch` submits the rendered scripts, and it trains end to end — the trainer through
`srun torchrun` over two Slurm tasks on CPU (gloo), rank 0 publishing every version.

One machine stands in for two nodes: the trainer's script asks for `--nodes=2 --ntasks-per-node=1`, and
the test submits it with `--nodes=1 --ntasks-per-node=2` on the command line (which overrides #SBATCH
lines), so the two torchrun agents rendezvous over loopback. Skipped with the reason where the packages
or root are missing (`.ci/run` installs them as root).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from lakeflow.io import open_store
from lakeflow.launch.targets import launch
from lakeflow.launch.workloads import LaunchOptions
from lakeflow.run import load_run_config
from lakeflow.weights.manifest import latest_version

from .slurm_cluster import missing, slurm_cluster

REPO = Path(__file__).resolve().parents[2]
STEPS = 3

pytestmark = [pytest.mark.slow, pytest.mark.skipif(missing() is not None, reason=str(missing()))]


def _run_config(tmp: Path) -> Path:
    config = {
        "name": "slurm-tiny",
        "steps": STEPS,
        "models": [
            {
                "id": "policy",
                "dataflow": {
                    "vocab_size": 512,
                    "n_samples": 4,
                    "prompts_per_step": 4,
                    "max_staleness": 2,
                    "steps_ahead": 1,
                    "policies": {
                        "filter": "keep_all",
                        "fresh": "fifo",
                        "staleness": "version_window",
                        "replay": "none",
                        "curation": "accept_all",
                    },
                    "dataset": {"type": "file", "path": str(REPO / "jobs/examples/data/sevens.jsonl")},
                },
                "trainer": {
                    "model": "tiny:default",
                    "model_cache_dir": str(tmp / "models"),
                    "lr": 1e-2,
                    "poll_s": 0.2,
                    "max_poll_s": 1.0,
                },
                "raas": {"replicas": 1, "config": {"engine": {"type": "hf"}, "max_new_tokens": 4, "poll_s": 0.2}},
            }
        ],
        "loop": {"poll_s": 0.2, "checkpoint_s": 10},
        "launch": {
            "dataflow": {"cpus": 1, "memory": "2Gi"},
            "raas": {"cpus": 1, "memory": "2Gi"},
            "trainer": {"nodes": 2, "cpus": 1, "memory": "2Gi", "time": "00:10:00"},
        },
    }
    path = tmp / "slurm-tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _submit(env: dict[str, str], script: Path, *extra: str) -> str:
    done = subprocess.run(["sbatch", "--parsable", *extra, str(script)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def _state(env: dict[str, str], job: str) -> str:
    done = subprocess.run(["scontrol", "show", "job", job], env=env, capture_output=True, text=True)
    match = re.search(r"JobState=(\S+)", done.stdout)
    return match.group(1) if match else "GONE"


def _logs(out: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted((out / "logs").glob("*.log")))


def test_a_tiny_run_trains_end_to_end_under_slurm(tmp_path: Path) -> None:
    out, lake = tmp_path / "out", tmp_path / "lake"
    options = LaunchOptions(lake=str(lake), workdir=str(REPO))
    rendered = launch(load_run_config(_run_config(tmp_path)), "slurm", options, out)
    trainer_script = rendered.files["slurm/train-policy.sbatch"]
    assert "#SBATCH --nodes=2" in trainer_script and "exec srun" in trainer_script
    with slurm_cluster(tmp_path / "slurm") as env:
        env = {**env, "LAKEFLOW_VENV": sys.prefix, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
        services = [_submit(env, out / "slurm" / f"{name}.sbatch") for name in ("dataflow", "raas-policy")]
        trainer = _submit(env, out / "slurm/train-policy.sbatch", "--nodes=1", "--ntasks-per-node=2")
        try:
            deadline = time.monotonic() + 600  # a generous bound on a shared machine; the test does not time it
            while _state(env, trainer) in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
                assert time.monotonic() < deadline, _logs(out)
                assert all(_state(env, j) in ("PENDING", "RUNNING") for j in services), _logs(out)
                time.sleep(1)
            assert _state(env, trainer) == "COMPLETED", _logs(out)
        finally:
            for job in [*services, trainer]:
                subprocess.run(["scancel", job], env=env, capture_output=True)
            for job in [*services, trainer]:
                for _ in range(300):
                    if _state(env, job) not in ("RUNNING", "COMPLETING", "PENDING"):
                        break
                    time.sleep(0.2)
    assert latest_version(open_store(str(lake)), "policy") == STEPS
    [log] = (out / "logs").glob("slurm-tiny-train-policy-*.log")
    text = log.read_text()
    assert text.count("published the base model") == 1  # rank 0 alone publishes version 0 ...
    assert text.count(f"weights version {STEPS} published") == 2  # ... and both ranks trained to the end
    assert os.path.exists(lake / "weights/policy/00000000/manifest.json")
