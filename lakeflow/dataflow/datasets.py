"""The prompts a run rolls out: a JSONL or Parquet file of {prompt, answer}, or generated arithmetic.

Loaded once into the catalog's `prompts` table; curation policies choose among them.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
import pyarrow.parquet as pq

from lakeflow.dataflow.config import Dataset, FileDataset
from lakeflow.errors import ConfigError

PROMPT_COLUMNS = ("prompt_id", "prompt_order", "prompt", "answer", "task_type", "dataset")


def load_prompts(dataset: Dataset) -> pa.Table:
    """The dataset as a table with PROMPT_COLUMNS (prompt ids made stable and unique)."""
    if isinstance(dataset, FileDataset):
        return _from_file(dataset)
    rng = np.random.default_rng(dataset.seed)
    a, b, c = (rng.integers(1, 100, dataset.prompts) for _ in range(3))
    prompts = [f"What is {x} + {y} * {z}? Answer with the number only." for x, y, z in zip(a, b, c, strict=True)]
    answers = [str(int(x + y * z)) for x, y, z in zip(a, b, c, strict=True)]
    return _table([f"arith-{dataset.seed}-{i}" for i in range(dataset.prompts)], prompts, answers, "math", "synthetic")


def _from_file(dataset: FileDataset) -> pa.Table:
    path = Path(dataset.path)
    try:
        raw = pq.read_table(path) if path.suffix == ".parquet" else pajson.read_json(path)
    except (OSError, pa.ArrowInvalid) as e:
        raise ConfigError(
            f"cannot read dataset {path}: {e} (expected .jsonl or .parquet rows with prompt, answer)"
        ) from e
    if "prompt" not in raw.column_names:
        raise ConfigError(f"dataset {path} has no 'prompt' column; columns: {', '.join(raw.column_names)}")
    prompts = [str(p) for p in raw.column("prompt").to_pylist()]
    answers = (
        [str(a) for a in raw.column("answer").to_pylist()] if "answer" in raw.column_names else [""] * len(prompts)
    )
    if "prompt_id" in raw.column_names:
        ids = [str(i) for i in raw.column("prompt_id").to_pylist()]
        if pc.count_distinct(pa.array(ids)).as_py() != len(ids):
            raise ConfigError(f"dataset {path}: prompt_id values are not unique")
    else:
        ids = [hashlib.sha1(p.encode()).hexdigest()[:16] + f"-{i}" for i, p in enumerate(prompts)]
    task_type = raw.column("task_type").to_pylist() if "task_type" in raw.column_names else ["math"] * len(prompts)
    return _table(ids, prompts, answers, task_type, dataset.name or path.stem)


def _table(ids: list[str], prompts: list[str], answers: list[str], task_type: object, name: str) -> pa.Table:
    n = len(ids)
    types = task_type if isinstance(task_type, list) else [task_type] * n
    return pa.table(
        {
            "prompt_id": ids,
            "prompt_order": pa.array(range(n), pa.int64()),
            "prompt": prompts,
            "answer": answers,
            "task_type": [str(t) for t in types],
            "dataset": [name] * n,
        }
    )
