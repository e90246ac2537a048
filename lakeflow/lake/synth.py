"""Synthetic trajectories with realistic shapes, written through the real shard writer.

Token ids follow a Zipf law over a 151,936-token vocabulary (Qwen2's), lengths are
log-normal, behaviour logprobs are mostly near zero with a heavy tail, and rewards are
binary with a per-prompt solve rate drawn from Beta(0.5, 0.5), so a realistic share of
groups is all-equal (zero advantage). Load tests, benchmarks and later tests use it.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa

from lakeflow.errors import InputError
from lakeflow.io import Store
from lakeflow.lake.commit import CommitRecord
from lakeflow.lake.schema import OPTIONAL_COLUMNS, SAMPLE_SCHEMA
from lakeflow.lake.writer import ShardWriter

VOCAB = 151_936


@dataclass(frozen=True)
class SynthSpec:
    """What to generate."""

    samples: int
    models: tuple[str, ...] = ("policy",)
    versions: tuple[int, int] = (0, 9)  # inclusive range of policy versions
    group_size: int = 8
    prompt_tokens: int = 256  # median prompt length
    response_tokens: int = 512  # median response length
    max_response_tokens: int = 4096
    tool_share: float = 0.1  # share of samples with a masked tool-output span
    seed: int = 0
    region: str = "local"


def synth_table(spec: SynthSpec, n: int, rng: np.random.Generator, raas_id: str) -> pa.Table:
    """`n` samples as a table of SAMPLE_SCHEMA (the last group may be cut short)."""
    groups = max(1, -(-n // spec.group_size))
    full = groups * spec.group_size
    g = np.repeat(np.arange(groups), spec.group_size)
    group_ids = np.array([uuid.UUID(bytes=rng.bytes(16)).hex for _ in range(groups)])
    model = np.array(spec.models)[rng.integers(0, len(spec.models), groups)][g]
    version = rng.integers(spec.versions[0], spec.versions[1] + 1, groups)[g]
    solve_rate = rng.beta(0.5, 0.5, groups)[g]
    reward = (rng.random(full) < solve_rate).astype(np.float64)

    prompt_len = np.clip(rng.lognormal(np.log(spec.prompt_tokens), 0.5, groups), 8, 8192).astype(np.int64)[g]
    response_len = np.clip(rng.lognormal(np.log(spec.response_tokens), 0.8, full), 1, spec.max_response_tokens)
    response_len = response_len.astype(np.int64)
    prompt_ids = _prompt_tokens(rng, prompt_len, spec.group_size)
    response_ids = _tokens(rng, int(response_len.sum()))
    # Mostly confident tokens, a heavy tail of uncertain ones (nats).
    confident = rng.random(len(response_ids)) < 0.7
    logprobs = np.where(
        confident, -rng.uniform(0, 0.05, len(response_ids)), -rng.exponential(1.5, len(response_ids))
    ).astype(np.float32)
    mask = np.ones(len(response_ids), dtype=np.uint8)
    offsets = np.concatenate([[0], np.cumsum(response_len)])
    for i in np.flatnonzero(rng.random(full) < spec.tool_share):
        start = offsets[i] + response_len[i] // 3
        mask[start : start + response_len[i] // 4] = 0
    now = datetime.now(UTC)
    sample_ids = [uuid.UUID(bytes=rng.bytes(16)).hex for _ in range(full)]
    columns = {
        "sample_id": sample_ids,
        "episode_id": sample_ids,
        "group_id": group_ids[g],
        "prompt_id": np.char.add("p", (g + rng.integers(0, 1 << 30)).astype(str)),
        "task_id": group_ids[g],
        "model_id": model,
        "role": np.full(full, "policy"),
        "policy_version": version,
        "max_version": version,
        "prompt_ids": _lists(prompt_ids, prompt_len, pa.int32()),
        "response_ids": _lists(response_ids, response_len, pa.int32()),
        "response_logprobs": _lists(logprobs, response_len, pa.float32()),
        "loss_mask": _lists(mask, response_len, pa.uint8()),
        "reward": reward,
        "finish_reason": np.where(response_len >= spec.max_response_tokens, "length", "stop"),
        "task_type": np.full(full, "math"),
        "dataset": np.full(full, "synthetic"),
        "raas_id": np.full(full, raas_id),
        "region": np.full(full, spec.region),
        "created_at": pa.array(np.full(full, int(now.timestamp() * 1e6)), pa.timestamp("us", tz="UTC")),
        "extra": np.full(full, "{}"),
        **{name: pa.nulls(full, SAMPLE_SCHEMA.field(name).type) for name in OPTIONAL_COLUMNS},
    }
    table = pa.table({k: _as_array(v, SAMPLE_SCHEMA.field(k).type) for k, v in columns.items()}, schema=SAMPLE_SCHEMA)
    return table.slice(0, n)


def write_synthetic(store: Store, spec: SynthSpec, writers: int = 1, max_rows: int = 2048) -> list[CommitRecord]:
    """Write `spec.samples` samples through `writers` concurrent shard writers; returns the commits."""
    if spec.samples < 1 or writers < 1:
        raise InputError("samples and writers must be at least 1")
    share = [spec.samples // writers + (i < spec.samples % writers) for i in range(writers)]

    def run(i: int) -> list[CommitRecord]:
        rng = np.random.default_rng([spec.seed, i])
        writer = ShardWriter(store, f"synth{i}", max_rows=max_rows)
        commits: list[CommitRecord] = []
        left = share[i]
        while left > 0:
            chunk = min(left, max_rows)
            commits += writer.write_table(synth_table(spec, chunk, rng, writer.writer_id))
            left -= chunk
        return commits

    with ThreadPoolExecutor(writers) as pool:
        return [c for part in pool.map(run, [i for i in range(writers) if share[i]]) for c in part]


def _tokens(rng: np.random.Generator, n: int) -> np.ndarray:
    # Zipf ranks mapped through a fixed permutation so frequent ids are spread over the vocabulary.
    ranks = np.minimum(rng.zipf(1.15, n), VOCAB) - 1
    tokens: np.ndarray = _PERMUTATION[ranks]
    return tokens


def _prompt_tokens(rng: np.random.Generator, prompt_len: np.ndarray, group_size: int) -> np.ndarray:
    # The samples of a group share their prompt.
    per_group = prompt_len[::group_size]
    tokens = _tokens(rng, int(per_group.sum()))
    starts = np.concatenate([[0], np.cumsum(per_group)])
    return np.concatenate([tokens[starts[i] : starts[i + 1]] for i in np.repeat(np.arange(len(per_group)), group_size)])


def _lists(values: np.ndarray, lengths: np.ndarray, value_type: pa.DataType) -> pa.Array:
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=value_type))


def _as_array(values: object, value_type: pa.DataType) -> pa.Array:
    if isinstance(values, pa.Array):
        return values
    return pa.array(values, type=value_type)


_PERMUTATION = np.random.default_rng(12345).permutation(VOCAB).astype(np.int32)
