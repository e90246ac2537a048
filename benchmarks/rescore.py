"""`python -m benchmarks rescore`: what re-scoring stored samples costs (`lakeflow rescore`), beside only
reading the same samples' text and answers with `lakeflow sql`, in one run.

The lake holds `samples` samples in groups of 8, written as the shard writer writes them. Each response is
English documentation (Python's own `pydoc_data.topics`, tokenized with a byte-level BPE trained on it,
as `benchmarks/text.py` does) ending in "The answer is \\boxed{d}." with a random digit; each prompt's
reference answer is a digit in the catalog's checkpoint (`prompts`), so about a tenth of the samples are
right. The tokenizer is published where a trainer publishes it (weights version 0), so the text is
decoded by the lake view as in a real run. Timed: the plain read (`SELECT response_text, answer` over the
same join) and `rescore` with the reward (`math` by default: math-verify on every completion), split into
its read, scoring and commit of the `rescores` rows.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import click
import numpy as np
import pyarrow as pa

from lakeflow.bench import machine
from lakeflow.lake.schema import SAMPLE_SCHEMA
from lakeflow.lake.synth import SynthSpec, synth_table


def build(store: Any, samples: int, response_tokens: int, seed: int = 0) -> None:
    """The lake the module docstring describes."""
    from benchmarks.text import _paragraphs, _tokenizer
    from lakeflow.catalog.state import Catalog
    from lakeflow.dataflow.checkpoint import save_checkpoint
    from lakeflow.lake import CommitCursor, layout
    from lakeflow.lake.writer import ShardWriter

    rng = random.Random(seed)
    tok = _tokenizer(8000)
    paragraphs = [p for p in _paragraphs() if len(p) > 200]
    table = synth_table(
        SynthSpec(samples=samples, prompt_tokens=8, response_tokens=8), samples, np.random.default_rng(seed), "bench"
    )
    response_ids = []
    for _ in range(samples):
        body = tok.encode(rng.choice(paragraphs)).ids[:response_tokens]
        response_ids.append(body + tok.encode(f" The answer is \\boxed{{{rng.randrange(10)}}}.").ids)
    columns = {
        "response_ids": pa.array(response_ids, pa.list_(pa.int32())),
        "response_logprobs": pa.array([[-0.1] * len(r) for r in response_ids], pa.list_(pa.float32())),
        "loss_mask": pa.array([[1] * len(r) for r in response_ids], pa.list_(pa.uint8())),
    }
    for name, column in columns.items():
        table = table.set_column(SAMPLE_SCHEMA.get_field_index(name), SAMPLE_SCHEMA.field(name), column)
    with ShardWriter(store, "bench", max_rows=2048) as writer:
        writer.write_table(table)
    store.put(layout.weights_object_key("policy", 0, "tokenizer.json"), tok.to_str().encode())
    ids = sorted(set(table.column("prompt_id").to_pylist()))
    prompts = {"prompt_id": ids, "prompt_order": list(range(len(ids))), "prompt": ["What is it?"] * len(ids)}
    prompts |= {"answer": [str(rng.randrange(10)) for _ in ids], "task_type": ["math"] * len(ids)}
    catalog = Catalog()
    catalog.tasks.load_prompts("policy", pa.table(prompts | {"dataset": ["bench"] * len(ids)}))
    save_checkpoint(store, catalog, CommitCursor(), {})


def run(samples: int = 10_000, response_tokens: int = 200, reward: str = "math") -> dict[str, Any]:
    from lakeflow.dataflow.status import checkpoint_tables
    from lakeflow.evaluation.rescore import rescore
    from lakeflow.io import open_store
    from lakeflow.lake.metrics import read_metrics
    from lakeflow.lakeview import connect_lake

    work = Path(tempfile.mkdtemp(prefix="lakeflow-bench-rescore-"))
    try:
        store = open_store(str(work / "lake"))
        build(store, samples, response_tokens)
        started = time.perf_counter()
        tables, _ = checkpoint_tables(store)
        lake = connect_lake(store, tables={"_prompts": tables["prompts"]})
        read = lake.sql(
            "SELECT t.sample_id, t.response_text, p.answer FROM trajectories t "
            "LEFT JOIN _prompts p ON p.model_id = t.model_id AND p.prompt_id = t.prompt_id"
        )
        lake.close()
        read_s = time.perf_counter() - started
        done = rescore(store, reward)
        total = done.read_s + done.score_s + done.write_s
        rows, _ = read_metrics(store, "rescores")
        return {
            "samples": samples,
            "response_tokens": f"{response_tokens} + the answer's",
            "read_rows": read.num_rows,
            "reward": reward,
            "read_only_s": round(read_s, 3),
            "rescore_s": round(total, 3),
            "rescore_read_s": done.read_s,
            "rescore_score_s": done.score_s,
            "rescore_write_s": done.write_s,
            "samples_per_s": round(samples / total, 1),
            "rows_written": rows.num_rows,
            "reward_mean": round(done.reward_mean, 3),
            "ratio_to_read_only": round(total / read_s, 2),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


@click.command("rescore")
@click.option("--samples", type=click.IntRange(min=8), default=10_000, show_default=True)
@click.option("--response-tokens", type=click.IntRange(min=1), default=200, show_default=True)
@click.option("--reward", default="math", show_default=True, help="The reward function to re-score with.")
def bench_rescore(samples: int, response_tokens: int, reward: str) -> None:
    """Re-scoring `samples` stored samples with a reward function beside only reading them (one JSON object)."""
    result = run(samples, response_tokens, reward)
    result["machine"] = machine()
    click.echo(json.dumps(result, indent=1))
