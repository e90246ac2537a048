"""Training batches for the GPU check, written to a local lake the way the dataflow leaves them.

Each step's samples are synthetic trajectories (`lake.synth`: Zipf tokens, log-normal lengths,
binary rewards per group) committed as one shard by the real shard writer; the batch object
(`lake.batch.write_batch`) references them with their group statistics, as the dataflow's serving
loop writes it. No dataflow process runs: its policies decide *which* groups, not the bytes the
trainer reads.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.gpu.plan import BatchSpec
from lakeflow.io import Store
from lakeflow.lake import ShardWriter
from lakeflow.lake.batch import BATCH_SCHEMA, write_batch
from lakeflow.lake.synth import VOCAB, SynthSpec, synth_table

TOKEN_COLUMNS = ("prompt_ids", "response_ids")


def write_batches(store: Store, model_id: str, steps: int, spec: BatchSpec, vocab: int, seed: int = 0) -> list[int]:
    """Batch objects 0 .. steps - 1 of `model_id` over freshly committed samples; returns the tokens
    (prompt + response, no padding) of each batch."""
    rng = np.random.default_rng(seed)
    writer = ShardWriter(store, "gpu-check", max_rows=spec.samples)
    tokens = []
    for step in range(steps):
        synth = SynthSpec(
            spec.samples,
            models=(model_id,),
            versions=(step, step),
            group_size=spec.group_size,
            prompt_tokens=spec.prompt_tokens,
            response_tokens=spec.response_tokens,
            max_response_tokens=spec.max_response_tokens,
            seed=seed,
        )
        table = _fit_vocab(synth_table(synth, spec.samples, rng, writer.writer_id), vocab)
        (commit,) = writer.write_table(table)
        write_batch(store, model_id, step, _batch_rows(table, commit.shard), {"source": "gpu-check"})
        tokens.append(sum(int(pc.sum(pc.list_value_length(table[c])).as_py()) for c in TOKEN_COLUMNS))
    return tokens


def _batch_rows(table: pa.Table, shard: str) -> pa.Table:
    """The batch record of every row of `table` (committed as `shard`, rows in order), with the group
    statistics the dataflow stores: mean and unbiased std of the group's rewards (1.0 for a singleton)."""
    groups = table.column("group_id").to_pylist()
    rewards = np.asarray(table.column("reward").to_pylist(), dtype=np.float64)
    _, inverse, counts = np.unique(np.asarray(groups), return_inverse=True, return_counts=True)
    mean = np.bincount(inverse, rewards) / counts
    squares = np.bincount(inverse, (rewards - mean[inverse]) ** 2)
    std = np.where(counts > 1, np.sqrt(squares / np.maximum(counts - 1, 1)), 1.0)
    return pa.table(
        {
            "sample_id": table.column("sample_id"),
            "shard": pa.array([shard] * table.num_rows),
            "row": pa.array(np.arange(table.num_rows, dtype=np.int32)),
            "group_id": table.column("group_id"),
            "prompt_id": table.column("prompt_id"),
            "kind": pa.array(["fresh"] * table.num_rows),
            "policy_version": table.column("policy_version"),
            "reward": pa.array(rewards),
            "group_mean": pa.array(mean[inverse]),
            "group_std": pa.array(std[inverse]),
            "group_size": pa.array(counts[inverse].astype(np.int32)),
        },
        schema=BATCH_SCHEMA,
    )


def _fit_vocab(table: pa.Table, vocab: int) -> pa.Table:
    """Token ids folded into [0, vocab) for a model smaller than synth's 151,936-token vocabulary."""
    if vocab >= VOCAB:
        return table
    for name in TOKEN_COLUMNS:
        column = table.column(name).combine_chunks()
        ids = column.values.to_numpy() % vocab
        folded = pa.ListArray.from_arrays(column.offsets, pa.array(ids, type=column.type.value_type))
        table = table.set_column(table.schema.get_field_index(name), name, folded)
    return table
