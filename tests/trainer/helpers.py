"""Build trainer inputs in a lake without a dataflow process: samples tokenised by the tiny model's
tokenizer, committed as shards, and batch objects that reference them; and, for the tests of the outbox
and its writer, small states and a step's stats."""

from __future__ import annotations

import random
import statistics
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import torch
import yaml

from lakeflow.io import Store
from lakeflow.lake import write_samples
from lakeflow.lake.batch import BATCH_SCHEMA, write_batch
from lakeflow.trainer.stats import StepStats
from lakeflow.weights import State
from lakeflow.weights.tensors import raw_tensor

MODEL = "policy"


def tokenizer(model_dir: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def make_group(tok: Any, rng: random.Random, n: int, version: int = 0) -> list[dict[str, Any]]:
    """n samples of one arithmetic prompt; answers right (reward 1) or wrong (0); one tool token masked."""
    a, b = rng.randint(1, 50), rng.randint(1, 50)
    prompt = tok.apply_chat_template([{"role": "user", "content": f"What is {a} + {b}?"}], add_generation_prompt=True)
    prompt_ids = list(prompt if isinstance(prompt, list) else prompt["input_ids"])
    end = tok.convert_tokens_to_ids("<|im_end|>")
    gid = uuid.uuid4().hex[:12]
    samples = []
    for i in range(n):
        right = i % 2 == 0
        response = [*tok.encode(str(a + b if right else a + b + rng.randint(1, 9))), end]
        samples.append(
            {
                "sample_id": uuid.uuid4().hex,
                "episode_id": uuid.uuid4().hex,
                "group_id": gid,
                "prompt_id": f"p-{gid}",
                "task_id": gid,
                "model_id": MODEL,
                "policy_version": version,
                "max_version": version,
                "prompt_ids": prompt_ids,
                "response_ids": response,
                "response_logprobs": [round(-rng.uniform(4.0, 7.0), 3) for _ in response],
                "loss_mask": [1] * (len(response) - 1) + [0 if i == 1 else 1],  # sample 1: last token "tool"
                "reward": 1.0 if right else 0.0,
                "finish_reason": "stop",
                "raas_id": "test",
            }
        )
    return samples


def write_step_batch(
    store: Store,
    step: int,
    tok: Any,
    groups: int = 2,
    n: int = 4,
    seed: int = 0,
    samples: list[dict[str, Any]] | None = None,
) -> list[str]:
    """Commit `groups` groups of n samples (or the given `samples`) and write them as batch `step`; returns the
    sample ids."""
    rng = random.Random(seed * 1000 + step)
    if samples is None:
        samples = [s for _ in range(groups) for s in make_group(tok, rng, n, version=step)]
    (commit,) = write_samples(store, samples, name=f"raas-{step}")
    rows = []
    for row, s in enumerate(samples):
        rewards = [x["reward"] for x in samples if x["group_id"] == s["group_id"]]
        rows.append(
            {
                "sample_id": s["sample_id"],
                "shard": commit.shard,
                "row": row,
                "group_id": s["group_id"],
                "prompt_id": s["prompt_id"],
                "kind": "fresh",
                "policy_version": s["policy_version"],
                "reward": s["reward"],
                "group_mean": statistics.fmean(rewards),
                "group_std": statistics.stdev(rewards) if len(rewards) > 1 else 1.0,
                "group_size": len(rewards),
            }
        )
    write_batch(store, MODEL, step, pa.Table.from_pylist(rows, schema=BATCH_SCHEMA), {"test": True})
    return [s["sample_id"] for s in samples]


def write_config(path: Path, cache_dir: str, **overrides: Any) -> Path:
    """A trainer config for the tiny model (built once under `cache_dir`)."""
    config: dict[str, Any] = {
        "model": "tiny:trainer",
        "model_cache_dir": cache_dir,
        "lr": 1e-3,
        "minibatches": 2,
        "max_tokens_per_microbatch": 64,
        "full_every": 10,
        "checkpoint_every": 1,  # the optimizer state of every version (tests of the schedule set their own)
        "poll_s": 0.05,
        "max_poll_s": 0.2,
    }
    config.update(overrides)
    path.write_text(yaml.safe_dump(config))
    return path


def write_in_process_config(path: Path, cache_dir: str, **overrides: Any) -> Path:
    """`write_config` for a trainer built in the test's own process: its writes run on a thread unless the test
    asks for the spawned writer (the default of `lakeflow train`). The writer's code is the same either way, and
    a spawned writer costs each test ~4 s of CPU (imports, and torch for the optimizer checkpoint); the spawned
    writer is tested by test_loop's writer test, test_outbox, test_process, test_lora and every `lakeflow run`."""
    return write_config(path, cache_dir, **{"writer": "thread", **overrides})


def tensors(seed: int) -> dict[str, torch.Tensor]:
    """A small state of three dtypes; `w` holds a NaN with a payload (copied as bits, not as a float)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(64, 32, generator=g)
    w.view(torch.int32)[0, 0] = 0x7FC00123
    return {"w": w, "b": torch.randn(7, generator=g).to(torch.bfloat16), "n": torch.arange(5)}


def as_state(ts: dict[str, torch.Tensor]) -> State:
    """`tensors` as a weight-store `State`."""
    views = {torch.float32: torch.uint32, torch.bfloat16: torch.uint16, torch.int64: torch.uint64}
    names = {torch.float32: "F32", torch.bfloat16: "BF16", torch.int64: "I64"}
    return {n: raw_tensor(names[t.dtype], t.shape, t.view(views[t.dtype]).numpy().copy()) for n, t in ts.items()}


def step_stats(step: int) -> StepStats:
    """The loop's part of step `step`'s stats, with plausible values."""
    metrics = {"loss": 0.25, "grad_norm": 1.5, "skipped_minibatches": 0, "skip_reason": "", "kl_behaviour_mean": 0.01}
    return StepStats(
        step=step, samples=8, tokens=40, reward_mean=0.5, lr=1e-3, metrics=metrics, wait_s=0.2, load_s=0.1,
        compute_s=1.0, memory={"rss_peak_mb": 100.0}, at="2026-01-01T00:00:00+00:00",
    )  # fmt: skip
