"""The three sections of the GPU check: the weight codec, the transformers engine and the trainer.

Each returns a dict for the report (with `passed`) and logs one line per measurement; pieces that
do not fit the time left are recorded as skipped. Model directories are built once and shared
(`models`: shape name -> directory); the engine uses the first model of the plan.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from pathlib import Path
from typing import Any

from benchmarks.errors import SkippedError
from benchmarks.gpu.plan import Clock, Log, Plan, Save, attempt, require_torch


def codec_section(plan: Plan, clock: Clock, log: Log) -> dict[str, Any]:
    """Encode/apply GB/s of the 8B-shaped slice at each worker count, threads and processes."""
    from benchmarks.gpu.codec import KINDS, copy_floor, measure, state_pair, warm_up
    from lakeflow.weights.codec import FORMAT
    from lakeflow.weights.tensors import state_bytes

    clock.need(min(plan.codec_cap_s, 30.0), "the codec")
    started = time.monotonic()
    warm_up()
    old, new, whole = state_pair(plan.codec_params, plan.codec_div)
    nbytes = state_bytes(new)
    out: dict[str, Any] = {
        "format": FORMAT,
        "host_cores": os.cpu_count(),
        "tensors": len(new),
        "params": nbytes // 2,
        "bytes": nbytes,
        "model_params": whole,
        "share_of_model": nbytes / 2 / whole,
        "generate_s": time.monotonic() - started,
        "runs": [],
    }
    log(f"  codec: {len(new)} tensors, {nbytes / 1e6:,.0f} MB bf16 ({nbytes / 2 / whole:.0%} of the 8B shapes)")
    for workers in plan.codec_workers:
        floor = copy_floor(new, workers)
        for kind in KINDS if workers > 1 else ("codec thread",):

            def one(workers: int = workers, kind: str = kind, floor: float = floor) -> dict[str, Any]:
                if time.monotonic() - started > plan.codec_cap_s:
                    raise SkippedError(f"the codec's {plan.codec_cap_s:.0f} s cap was reached")
                clock.need(5.0, "a codec measurement")
                row = measure(old, new, workers, kind)
                ratios = {"encode_vs_floor": row["encode_gbps"] / floor, "apply_vs_floor": row["apply_gbps"] / floor}
                return {**row, "copy_floor_gbps": floor, **ratios}

            row = attempt(one)
            out["runs"].append({"workers": workers, "kind": kind, **row})
            if row["status"] == "ok":
                log(
                    f"  codec {row['kind']} x{workers}: encode {row['encode_gbps']:.2f} GB/s, apply "
                    f"{row['apply_gbps']:.2f} GB/s, copy floor {floor:.1f} GB/s, bit-exact {row['bit_exact']}"
                )
    out["passed"] = all(r["status"] != "failed" and r.get("bit_exact", True) for r in out["runs"])
    return out


def engine_section(
    plan: Plan, device: str, work: Path, models: dict[str, str], clock: Clock, log: Log
) -> dict[str, Any]:
    """Generation tokens/s and logprob agreement of the transformers engine on the plan's first model."""
    require_torch(device)
    from benchmarks.gpu.engine import EngineRun, engine_check

    clock.need(plan.engine_need_s, "the engine")
    name = plan.models[0]
    model_dir, build_s = model_directory(name, device, work, models)
    prompts, n, max_tokens = plan.engine
    out = engine_check(EngineRun(model_dir, device, prompts, n, max_tokens))
    f32 = out["agreement"]["float32"]
    diffs = ", ".join(f"{d} {a['max_abs_diff']:.2e}" for d, a in out["agreement"].items())
    log(f"  engine {name} ({out['dtype']}): {out['tokens_per_s']:,.0f} tokens/s; max |engine - trainer| {diffs}")
    return {"model": name, "build_s": build_s, **out, "passed": f32["within_tolerance"]}


def trainer_section(
    plan: Plan, device: str, work: Path, models: dict[str, str], clock: Clock, log: Log, save: Save
) -> dict[str, Any]:
    """Each model with its writes in a writer process, a thread and in line, with an optimizer checkpoint every
    step and on the default schedule (`gpu_trainer.CONFIGURATIONS`); `save` gets the section so far after each
    model."""
    require_torch(device)
    from benchmarks.gpu.trainer import PEAK_FLOPS, PEAK_NAME

    out: dict[str, Any] = {
        "mode": f"single process on {device}: trainer.distributed uses FSDP2 only under torchrun with "
        "WORLD_SIZE > 1, so one GPU trains unsharded",
        "dtype": plan.dtype,
        "peak_flops": PEAK_FLOPS,
        "peak": PEAK_NAME,
        "models": [],
    }
    for name, cap in zip(plan.models, plan.run_cap_s, strict=True):

        def one(name: str = name, cap: float = cap) -> dict[str, Any]:
            return _train_model(plan, name, cap, device, work, models, clock, log)

        entry = attempt(one)
        out["models"].append({"model": name, **entry})
        if name != plan.models[0] and name in models:  # the engine only needs the first: free the disk
            shutil.rmtree(models.pop(name), ignore_errors=True)
        save({"status": "running", **out})
    runs = [r for m in out["models"] for r in m.get("runs", [])]
    out["passed"] = all(m["status"] != "failed" for m in out["models"]) and all(
        r["status"] != "failed" and r.get("loss_finite", True) and r.get("bit_exact", True) for r in runs
    )
    return out


def _train_model(
    plan: Plan, name: str, cap: float, device: str, work: Path, models: dict[str, str], clock: Clock, log: Log
) -> dict[str, Any]:
    from benchmarks.gpu.trainer import CONFIGURATIONS, TrainRun, Writer, train

    clock.need(cap / 2, f"training {name}")
    model_dir, build_s = model_directory(name, device, work, models)
    runs = []
    rows = CONFIGURATIONS if plan.trainer_rows is None else tuple(CONFIGURATIONS[i] for i in plan.trainer_rows)
    for label, overlap, writer, every in rows:  # the rows of `python -m benchmarks trainer`

        def one(overlap: bool = overlap, writer: Writer = writer, every: int | None = every) -> dict[str, Any]:
            clock.need(cap / 3, f"a {name} trainer run")
            run = TrainRun(
                model_dir, device, overlap, plan.steps, plan.batch, plan.max_tokens_per_microbatch, plan.dtype
            )
            run = dataclasses.replace(run, writer=writer, checkpoint_every=every)
            return train(run, work / f"train-{name}", min(cap, clock.left()))

        row = {"overlap_io": overlap, "writer": label, **attempt(one)}
        runs.append(row)
        what = f"writes {label}, checkpoint every {row.get('checkpoint_every', every or 'default')}"
        if row["status"] == "ok":
            log(
                f"  trainer {name} {what}: {row['params'] / 1e6:,.1f}M params, {row['steps']} steps, "
                f"cycle {row['cycle_s']:.2f} s (compute {row['compute_s']:.2f} s, {row['cycle_over_compute']:.2f}x), "
                f"{row['tokens_per_s']:,.0f} tokens/s, MFU {row['mfu']:.1%}, lake I/O blocking {row['io_share']:.1%}, "
                f"bit-exact {row['bit_exact']}"
            )
        else:
            log(f"  trainer {name} {what}: {row['status']}: {row.get('reason') or row.get('error')}")
    return {"build_s": build_s, "runs": runs}


def model_directory(name: str, device: str, work: Path, models: dict[str, str]) -> tuple[str, float]:
    """The directory of model `name`, built on `device` unless built already; and the seconds it took."""
    from benchmarks.gpu.model import SHAPES, build_model_dir

    if name in models:
        return models[name], 0.0
    started = time.monotonic()
    models[name] = build_model_dir(SHAPES[name], work / "models" / name, device, work / "models")
    return models[name], time.monotonic() - started
