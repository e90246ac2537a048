"""The transformers engine on an accelerator: generation throughput, and how closely its behaviour
logprobs agree with the trainer's forward pass (`trainer.model.token_logprobs`) over the same tokens.

The agreement is what the importance ratio pi_theta / pi_behaviour rests on: measured in the
engine's dtype (bf16 on a GPU: reported, not judged) and in float32, where it must hold to
`F32_TOLERANCE` nats as the CPU tests require of it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

TEMPERATURE = 0.7
F32_TOLERANCE = 1e-3  # nats, largest |engine - trainer| logprob over every sampled token


@dataclass(frozen=True)
class EngineRun:
    """What to generate: `prompts` prompts, `n` samples each, `max_tokens` new tokens."""

    model_dir: str
    device: str
    prompts: int
    n: int
    max_tokens: int


def engine_check(run: EngineRun) -> dict[str, Any]:
    """Throughput in the engine's fast dtype (bf16 on CUDA, float32 on CPU), then agreement in both."""
    fast = "bfloat16" if run.device.startswith("cuda") else "float32"
    engine = _engine(run, fast)
    messages = [
        [{"role": "user", "content": f"What is {a} + {3 * a}? Think step by step."}] for a in range(run.prompts)
    ]
    engine.generate(messages[:1], 2, 4, TEMPERATURE)  # warm-up: kernels, allocator
    _sync(run.device)
    started = time.perf_counter()
    groups = engine.generate(messages, run.n, run.max_tokens, TEMPERATURE)
    _sync(run.device)
    seconds = time.perf_counter() - started
    completions = [c for group in groups for c in group]
    generated = sum(len(c.token_ids) for c in completions)
    out: dict[str, Any] = {
        "dtype": fast,
        "prompts": run.prompts,
        "samples_per_prompt": run.n,
        "max_tokens": run.max_tokens,
        "generated_tokens": generated,
        "generate_s": seconds,
        "tokens_per_s": generated / seconds,
        "agreement": {fast: agreement(engine, completions)},
    }
    if fast != "float32":
        del engine
        engine = _engine(run, "float32")
        (few,) = engine.generate(messages[:1], 4, min(run.max_tokens, 32), TEMPERATURE)
        out["agreement"]["float32"] = agreement(engine, few)
    f32 = out["agreement"]["float32"]
    f32["tolerance"] = F32_TOLERANCE
    f32["within_tolerance"] = f32["max_abs_diff"] <= F32_TOLERANCE
    return out


def agreement(engine: Any, completions: list[Any]) -> dict[str, Any]:
    """Max and mean |engine logprob - trainer logprob| over every sampled token (nats)."""
    import torch

    from lakeflow.trainer.model import token_logprobs

    diffs = []
    with torch.no_grad():
        for c in completions:
            ids = torch.tensor([c.prompt_ids + c.token_ids], device=engine.config.device)
            trainer = token_logprobs(engine.model, ids, torch.ones_like(ids), TEMPERATURE)[0, len(c.prompt_ids) :]
            diffs.append((trainer.float().cpu() - torch.tensor(c.logprobs)).abs())
    every = torch.cat(diffs)
    return {"tokens": int(every.numel()), "max_abs_diff": float(every.max()), "mean_abs_diff": float(every.mean())}


def _engine(run: EngineRun, dtype: str) -> Any:
    from lakeflow.raas.config import HFEngineConfig
    from lakeflow.raas.engines import HFEngine

    engine = HFEngine(HFEngineConfig(device=run.device, dtype=dtype), seed=0)
    engine.load(run.model_dir)
    return engine


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()
