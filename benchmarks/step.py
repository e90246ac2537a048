"""`python -m benchmarks step`: the trainer's scoring pass (forward, token logprobs and entropy, backward)
three ways on the same batch and weights, interleaved, medians and ratios:

- `every position, fp32`: logits at every position of prompt + response, as the trainer did before it
  scored from the first response token;
- `response only, fp32`: what the trainer does by default (`first_scored`, `logits_to_keep`);
- `response only, bf16 autocast`: the same under `autocast: bfloat16` (fp32 master weights and gradients);
- `…, act. ckpt`: and `activation_checkpointing: true` (each decoder layer recomputed in the backward).

The model is a model directory (SmolLM2-135M-Instruct from `lakeflow models convert`) or, without one,
a Qwen2 of SmolLM2-135M's sizes initialised locally. The batch is right-padded prompt + response rows
of random token ids, the shape of the smollm2-add recipe's (8 groups of 8, ~40 prompt and ~24 response
tokens). Each measurement runs in a fresh process (load, warm-up pass, timed pass), whose peak resident
set is reported.
"""

from __future__ import annotations

import json
import multiprocessing
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import click
import torch

from benchmarks.gpu.model import SHAPES, build_model_dir
from lakeflow.text import text_table
from lakeflow.trainer.memory import StepMemory
from lakeflow.trainer.model import (
    checkpoint_activations,
    compute_precision,
    first_scored,
    load_model,
    token_logprobs_entropy,
)

WAYS = {  # name -> (score from the first response token, autocast dtype, activation checkpointing)
    "every position, fp32": (False, None, False),
    "response only, fp32": (True, None, False),
    "response only, bf16 autocast": (True, "bfloat16", False),
    "response only, bf16 autocast, act. ckpt": (True, "bfloat16", True),
}


def make_batch(rows: int, prompt: int, response: int, vocab: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Right-padded rows: prompts of prompt ± 4 tokens, responses of 1 … `response` tokens."""
    g = torch.Generator().manual_seed(seed)
    width = prompt + 4 + response
    ids = torch.randint(0, vocab, (rows, width), generator=g)
    attention = torch.zeros(rows, width, dtype=torch.int64)
    mask = torch.zeros(rows, width)
    for i in range(rows):
        p = prompt + int(torch.randint(-4, 5, (1,), generator=g))
        r = int(torch.randint(1, response + 1, (1,), generator=g))
        attention[i, : p + r] = 1
        mask[i, p : p + r] = 1.0
    return {"input_ids": ids, "attention_mask": attention, "mask": mask}


def one_pass(model: Any, batch: dict[str, torch.Tensor], sliced: bool, autocast: str | None, recompute: bool) -> float:
    """Forward, GRPO-shaped surrogate (logprobs over the masked tokens), backward; seconds."""
    checkpoint_activations(model, recompute)
    model.zero_grad(set_to_none=True)
    started = time.perf_counter()
    start = first_scored(batch["mask"]) if sliced else 1
    with compute_precision("cpu", autocast):
        logp, _ = token_logprobs_entropy(model, batch["input_ids"], batch["attention_mask"], 0.7, start)
    loss = -(torch.where(batch["mask"] > 0, logp, 0.0).sum() / batch["mask"].sum())
    loss.backward()  # type: ignore[no-untyped-call]
    return time.perf_counter() - started


def measure(model_dir: str, rows: int, prompt: int, response: int, way: str) -> dict[str, float]:
    """One way in this (fresh) process: load, a warm-up pass (first-touch pages, oneDNN kernels), a timed
    pass; its seconds and the process's peak resident set (the allocator keeps what a pass freed, so peaks
    of ways are only comparable between processes)."""
    torch.manual_seed(0)
    model = load_model(model_dir, "float32")
    batch = make_batch(rows, prompt, response, int(model.config.vocab_size))
    one_pass(model, batch, *WAYS[way])
    seconds = one_pass(model, batch, *WAYS[way])
    peak = StepMemory("cpu").peaks()["rss_peak_mb"]
    return {
        "s": seconds,
        "rss_peak_mb": peak,
        "tokens": int(batch["attention_mask"].sum()),
        "scored": int(batch["mask"].sum()),
    }


def run_bench(model_dir: str | None, rows: int, prompt: int, response: int, repeats: int) -> dict[str, Any]:
    spawn = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="lakeflow-bench-step-") as work:
        if model_dir is None:
            model_dir = build_model_dir(SHAPES["smollm2-135m"], Path(work) / "model", "cpu", Path(work) / "models")
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in WAYS}
        for _ in range(repeats):  # interleaved, so a change in the machine's load reaches every way alike
            for name in WAYS:
                with ProcessPoolExecutor(1, mp_context=spawn) as pool:  # one process per measurement
                    runs[name].append(pool.submit(measure, model_dir, rows, prompt, response, name).result())
    base = statistics.median(r["s"] for r in runs["every position, fp32"])
    rows_out = []
    for name, passes in runs.items():
        median = statistics.median(r["s"] for r in passes)
        rows_out.append(
            {
                "way": name,
                "median_s": round(median, 3),
                "speedup": round(base / median, 2),
                "rss_peak_mb": round(max(r["rss_peak_mb"] for r in passes)),
                "runs_s": [round(r["s"], 3) for r in passes],
            }
        )
    first = runs["every position, fp32"][0]
    return {"model": model_dir, "rows": rows, "tokens": first["tokens"], "scored": first["scored"], "ways": rows_out}


@click.command("step")
@click.option("--model", "model_dir", default=None, help="A model directory (default: SmolLM2-135M's shape, random).")
@click.option("--rows", default=64, show_default=True, help="Sequences in the batch.")
@click.option("--prompt", default=40, show_default=True, help="Typical prompt length in tokens (± 4).")
@click.option("--response", default=24, show_default=True, help="Longest response in tokens.")
@click.option("--repeats", default=3, show_default=True, help="Passes of each way (the median is reported).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def bench_step(model_dir: str | None, rows: int, prompt: int, response: int, repeats: int, as_json: bool) -> None:
    """The trainer's scoring pass: every position vs the response only, fp32 vs bf16 autocast, with and
    without activation checkpointing."""
    result = run_bench(model_dir, rows, prompt, response, repeats)
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(f"{result['model']}: {result['rows']} rows, {result['tokens']} tokens, {result['scored']} scored")
    header = ["way", "median_s", "speedup", "rss_peak_mb", "runs_s"]
    table = [[str(w[h]) if h != "runs_s" else " ".join(map(str, w[h])) for h in header] for w in result["ways"]]
    click.echo("\n".join(text_table(header, table, rule=True)))
