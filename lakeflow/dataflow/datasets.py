"""The prompts a run rolls out: a JSONL or Parquet file of {prompt, answer}, generated arithmetic,
a reasoning-gym generator (its answer column carries the entry its scorer needs, as JSON), or
HumanEval (its answer column carries the hidden tests and the canonical solution, as JSON), or the rows
a user's loader function returns (`{type: loader, loader: "package.module:attr", args: {...}}`), or a mix
of those (`{type: mix, parts: {name: dataset, ...}}`, each part's `dataset` column its name).

Loaded once into the catalog's `prompts` table; curation policies choose among them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
import pyarrow.parquet as pq

from lakeflow.dataflow.config import (
    Dataset,
    FileDataset,
    HumanEvalDataset,
    LoaderDataset,
    MixDataset,
    ReasoningGymDataset,
)
from lakeflow.errors import ConfigError, LakeflowError, MissingExtraError
from lakeflow.humaneval import TASK_TYPE as HUMANEVAL_TASK_TYPE
from lakeflow.humaneval import humaneval_rows
from lakeflow.io import open_store
from lakeflow.plugins import call_problem, resolve

PROMPT_COLUMNS = ("prompt_id", "prompt_order", "prompt", "answer", "task_type", "dataset")


def load_prompts(dataset: Dataset) -> pa.Table:
    """The dataset as a table with PROMPT_COLUMNS (prompt ids made stable and unique)."""
    if isinstance(dataset, MixDataset):
        return _mix(dataset)
    if isinstance(dataset, FileDataset):
        return _from_file(dataset)
    if isinstance(dataset, HumanEvalDataset):
        rows = humaneval_rows(dataset.limit)
        ids, prompts, answers = ([r[k] for r in rows] for k in ("prompt_id", "prompt", "answer"))
        return _table(ids, prompts, answers, HUMANEVAL_TASK_TYPE, "humaneval")
    if isinstance(dataset, ReasoningGymDataset):
        return _from_reasoning_gym(dataset)
    if isinstance(dataset, LoaderDataset):
        return _from_loader(dataset)
    rng = np.random.default_rng(dataset.seed)
    a, b, c = (rng.integers(1, dataset.max_value + 1, dataset.prompts) for _ in range(3))
    if dataset.form == "add":
        prompts = [f"What is {x} + {y}? Reply with just the number." for x, y in zip(a, b, strict=True)]
        answers = [str(int(x + y)) for x, y in zip(a, b, strict=True)]
        return _table(
            [f"add-{dataset.seed}-{i}" for i in range(dataset.prompts)], prompts, answers, "math", "synthetic"
        )
    prompts = [f"What is {x} + {y} * {z}? Answer with the number only." for x, y, z in zip(a, b, c, strict=True)]
    answers = [str(int(x + y * z)) for x, y, z in zip(a, b, c, strict=True)]
    return _table([f"arith-{dataset.seed}-{i}" for i in range(dataset.prompts)], prompts, answers, "math", "synthetic")


def _mix(dataset: MixDataset) -> pa.Table:
    """The parts one after the other, in the order given: ids prefixed with the part's name, which is also
    their `dataset`, and one prompt order across them."""
    parts = []
    for name, part in dataset.parts.items():
        table = load_prompts(part)
        ids = pc.binary_join_element_wise(f"{name}:", table.column("prompt_id"), "")
        table = table.set_column(0, "prompt_id", ids)
        parts.append(
            table.set_column(table.schema.get_field_index("dataset"), "dataset", pa.array([name] * len(table)))
        )
    mixed = pa.concat_tables(parts)
    return mixed.set_column(1, "prompt_order", pa.array(range(len(mixed)), pa.int64()))


def _read(location: str) -> Any:
    """A local path, or a store URL (`s3://bucket/key`: credentials and endpoint from the environment, as
    boto3 finds them) read whole through lakeflow's store."""
    if "://" not in location:
        return location
    parent, _, name = location.rpartition("/")
    return pa.BufferReader(open_store(parent).get(name))


def _from_file(dataset: FileDataset) -> pa.Table:
    path = Path(dataset.path)
    try:
        source = _read(dataset.path)
        raw = pq.read_table(source) if path.suffix == ".parquet" else pajson.read_json(source)
    except (OSError, pa.ArrowInvalid, LakeflowError) as e:
        raise ConfigError(
            f"cannot read dataset {dataset.path}: {e} (expected .jsonl or .parquet rows with prompt, answer)"
        ) from e
    if "prompt" not in raw.column_names:
        raise ConfigError(f"dataset {dataset.path} has no 'prompt' column; columns: {', '.join(raw.column_names)}")
    prompts = [str(p) for p in raw.column("prompt").to_pylist()]
    answers = (
        [str(a) for a in raw.column("answer").to_pylist()] if "answer" in raw.column_names else [""] * len(prompts)
    )
    if "prompt_id" in raw.column_names:
        ids = [str(i) for i in raw.column("prompt_id").to_pylist()]
        if pc.count_distinct(pa.array(ids)).as_py() != len(ids):
            raise ConfigError(f"dataset {dataset.path}: prompt_id values are not unique")
    else:
        ids = [hashlib.sha1(p.encode()).hexdigest()[:16] + f"-{i}" for i, p in enumerate(prompts)]
    given = raw.column("task_type").to_pylist() if "task_type" in raw.column_names else [None] * len(prompts)
    task_type = ["math" if t is None else t for t in given]  # a row without one is math, as a file without any
    return _table(ids, prompts, answers, task_type, dataset.name or path.stem)


ROW_KEYS = ("prompt", "answer", "prompt_id", "task_type")  # what a loader's rows may hold


def dataset_loader(dataset: LoaderDataset, key: str = "dataset.loader") -> Callable[..., Any]:
    """The loader function a `type: loader` dataset names, checked to take its args; PluginError naming `key`."""
    args = dict(dataset.args)
    what = f"loader({', '.join(args)})"
    return resolve("dataset", dataset.loader, {}, key=key, check=lambda f: call_problem(f, what=what, **args))


def _from_loader(dataset: LoaderDataset) -> pa.Table:
    loader = dataset_loader(dataset)
    where = f"dataset loader {dataset.loader!r}"
    try:
        rows = loader(**dataset.args)
        rows = list(rows) if isinstance(rows, Iterable) and not isinstance(rows, str | bytes | Mapping) else rows
    except Exception as e:  # the user's code: report it as the dataset's problem, with its cause chained
        raise ConfigError(f"{where} failed: {type(e).__name__}: {e}") from e
    if not isinstance(rows, list):
        raise ConfigError(f"{where} returned {type(rows).__name__}; it must return (or yield) rows (mappings)")
    if not rows:
        raise ConfigError(f"{where} returned no rows")
    ids, prompts, answers, types = [], [], [], []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping) or "prompt" not in row:
            raise ConfigError(f"{where}: row {i} is not a mapping with a 'prompt' ({row!r:.80})")
        if extra := sorted(set(row) - set(ROW_KEYS)):
            raise ConfigError(f"{where}: row {i} has keys {extra}; rows hold {', '.join(ROW_KEYS)}")
        prompt = row["prompt"]
        prompts.append(prompt if isinstance(prompt, str) else json.dumps(prompt))  # chat messages as JSON
        answer = row.get("answer", "")
        answers.append(answer if isinstance(answer, str) else json.dumps(answer, default=str))
        ids.append(str(row["prompt_id"]) if "prompt_id" in row else "")
        types.append(str(row.get("task_type") or "math"))
    if all(ids):
        if len(set(ids)) != len(ids):
            raise ConfigError(f"{where}: prompt_id values are not unique")
    elif any(ids):
        raise ConfigError(f"{where}: give every row a prompt_id, or none")
    else:
        ids = [hashlib.sha1(p.encode()).hexdigest()[:16] + f"-{i}" for i, p in enumerate(prompts)]
    name = dataset.name or dataset.loader.rpartition(":")[2].rpartition(".")[2]
    return _table(ids, prompts, answers, types, name)


def task_types(dataset: Dataset) -> set[str] | None:
    """The task types of a dataset's rows, when known without running user code (a file is read when it is
    here); None when not (a loader, a file on another machine)."""
    if isinstance(dataset, MixDataset):
        found = [task_types(part) for part in dataset.parts.values()]
        return None if any(t is None for t in found) else set().union(*(t for t in found if t is not None))
    if isinstance(dataset, HumanEvalDataset):
        return {HUMANEVAL_TASK_TYPE}
    if isinstance(dataset, ReasoningGymDataset):
        return {f"reasoning_gym:{dataset.name}"}
    if isinstance(dataset, LoaderDataset):
        return None
    if isinstance(dataset, FileDataset):
        if "://" in dataset.path or not Path(dataset.path).is_file():
            return None
        return set(_from_file(dataset).column("task_type").to_pylist())
    return {"math"}


def _from_reasoning_gym(dataset: ReasoningGymDataset) -> pa.Table:
    try:
        import reasoning_gym
    except ImportError as e:
        raise MissingExtraError("reasoning-gym", "raas") from e
    known = reasoning_gym.factory.DATASETS
    if dataset.name not in known:
        raise ConfigError(f"unknown reasoning-gym generator {dataset.name!r}; known: {', '.join(sorted(known))}")
    config = {"size": dataset.size, "seed": dataset.seed, **dataset.config}
    try:
        generator = reasoning_gym.create_dataset(dataset.name, **config)
    except (TypeError, ValueError, AssertionError) as e:  # unknown key (TypeError), validate() (assert)
        raise ConfigError(f"reasoning-gym generator {dataset.name!r} refuses config {dataset.config}: {e}") from e
    entries = [generator[i] for i in range(dataset.size)]
    prompts = [str(e["question"]) for e in entries]
    if dataset.system_prompt:
        system = {"role": "system", "content": dataset.system_prompt}
        prompts = [json.dumps([system, {"role": "user", "content": p}]) for p in prompts]
    # What the reward needs to rebuild the generator's scorer and call score_answer(text, entry).
    answers = [
        json.dumps({"generator": dataset.name, "config": config, "entry": e}, default=_jsonable) for e in entries
    ]
    for entry, answer in zip(entries, answers, strict=True):
        _check_round_trip(generator, entry, json.loads(answer)["entry"], dataset.name)
    # Parameters are part of the id: the same seed with other parameters makes other prompts.
    params = hashlib.sha1(json.dumps(dataset.config, sort_keys=True).encode()).hexdigest()[:8]
    stem = f"{dataset.name}-{dataset.seed}-{params}" if dataset.config else f"{dataset.name}-{dataset.seed}"
    ids = [f"{stem}-{i}" for i in range(dataset.size)]
    return _table(ids, prompts, answers, f"reasoning_gym:{dataset.name}", dataset.name)


def _jsonable(value: object) -> object:
    """The few non-JSON values reasoning-gym puts in metadata: numpy arrays, sets, Fractions (as text)."""
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    tolist = getattr(value, "tolist", None)
    return tolist() if callable(tolist) else str(value)


def _check_round_trip(generator: Any, entry: dict[str, Any], decoded: dict[str, Any], name: str) -> None:
    """Refuse a generator whose scorer depends on what JSON loses (tuples, numpy, Fractions in metadata)."""
    gold = entry.get("answer")
    if gold is None:
        return
    gold = gold if isinstance(gold, str) else json.dumps(gold, default=_jsonable)
    try:
        before = generator.score_answer(gold, entry)
    except Exception:  # the generator cannot score its own reference (a bug of its own): nothing to compare
        return
    try:
        after = generator.score_answer(gold, decoded)
    except Exception as e:
        after = f"{type(e).__name__}: {e}"
    if after != before:
        raise ConfigError(
            f"reasoning-gym generator {name!r} cannot be used: its scorer gives the reference answer {before} on "
            f"the generated entry but {after} on the entry read back from JSON (its metadata holds tuples or "
            "other non-JSON values the scorer compares)"
        )


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
