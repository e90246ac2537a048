"""`lakeflow rescore`: score stored samples again with another reward, without generating them again.

The samples are read as `lakeflow sql` reads them (the `trajectories` view: committed shards less the
quarantined, `response_text` decoded by the model's own tokenizer), chosen by a SQL condition, joined
with their reference answers from the dataflow catalog's `prompts` (its newest checkpoint), and scored by
a reward function (a shipped name, `package.module:attr` or an entry point, as a pool's `reward`). The
new rewards are appended to the lake's `rescores` table (one row per sample: the new reward and reason
beside the stored one, under the re-scoring's name), with the metric tables' commit protocol: a re-scoring
killed midway leaves only whole, committed objects. So two rewards can be compared on identical rollouts:

    SELECT name, avg(reward), avg(stored_reward) FROM rescores GROUP BY name
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lakeflow.dataflow.status import checkpoint_tables
from lakeflow.errors import InputError
from lakeflow.io import Store
from lakeflow.lake.metrics import MetricsWriter
from lakeflow.lakeview import QueryError, connect_lake
from lakeflow.raas.outcome import RewardFn
from lakeflow.raas.rewards import build_reward

COLUMNS = ["sample_id", "model_id", "prompt_id", "task_type", "stored_reward", "text", "answer"]
_FLUSH_ROWS = 50_000  # rows per committed object


@dataclass(frozen=True)
class Rescored:
    """What a re-scoring did: samples scored, the mean new and stored rewards, where the time went."""

    name: str
    samples: int
    reward_mean: float
    stored_mean: float
    read_s: float  # the query: shards read, response text decoded
    score_s: float  # the reward function over every sample
    write_s: float  # the rows committed to the `rescores` table


def rescore(
    store: Store,
    reward: str,
    where: str = "true",
    name: str | None = None,
    without_answers: bool = False,
    max_chars: int = 8192,
) -> Rescored:
    """Score the samples of `store` that `where` (a condition on `trajectories`' columns) chooses with the
    reward function `reward`; append the rows to `rescores`. InputError for more than one condition, samples
    whose text or answer is missing, or none chosen; QueryError for a condition DuckDB refuses."""
    started = time.perf_counter()
    rows = _read(store, where, without_answers)
    read_s = time.perf_counter() - started
    started = time.perf_counter()
    scored = _score(rows, reward, max_chars)
    score_s = time.perf_counter() - started
    started = time.perf_counter()
    label = name or reward
    writer = MetricsWriter(store, "rescores", "rescore", flush_s=math.inf)
    for i, (value, reason) in enumerate(scored):
        writer.add(
            {
                "model_id": rows["model_id"][i],
                "name": label,
                "reward_spec": reward,
                "sample_id": rows["sample_id"][i],
                "prompt_id": rows["prompt_id"][i],
                "reward": value,
                "reason": reason,
                "stored_reward": rows["stored_reward"][i],
            }
        )
        if (i + 1) % _FLUSH_ROWS == 0:
            _flush(writer)
    _flush(writer)
    write_s = time.perf_counter() - started
    n = len(scored)
    return Rescored(
        label,
        n,
        sum(v for v, _ in scored) / n,
        sum(rows["stored_reward"]) / n,
        round(read_s, 3),
        round(score_s, 3),
        round(write_s, 3),
    )


def _read(store: Store, where: str, without_answers: bool) -> dict[str, list[Any]]:
    """The chosen samples' columns (COLUMNS), each a list."""
    tables, _ = checkpoint_tables(store)  # the catalog's prompts hold the reference answers
    prompts = tables.get("prompts")
    if prompts is None:
        prompts = pa.table({"model_id": pa.array([], pa.string()), "prompt_id": [], "answer": []})
    lake = connect_lake(store, tables={"_prompts": prompts.select(["model_id", "prompt_id", "answer"])})
    try:
        try:
            one = lake.statements(f"SELECT * FROM trajectories WHERE ({where})") == 1
        except QueryError:
            one = False
        if not one:
            raise InputError(f"--where {where!r}: give one SQL condition on trajectories' columns")
        query = (
            "WITH chosen AS (SELECT * FROM trajectories WHERE sample_id IN "
            f"(SELECT sample_id FROM trajectories WHERE ({where}))) "
            "SELECT c.sample_id, c.model_id, c.prompt_id, c.task_type, c.reward AS stored_reward, "
            "c.response_text AS text, p.answer FROM chosen c "
            "LEFT JOIN _prompts p ON p.model_id = c.model_id AND p.prompt_id = c.prompt_id ORDER BY c.sample_id"
        )
        table = lake.sql(query)
    finally:
        lake.close()
    if table.column_names != COLUMNS:
        raise InputError(f"--where {where!r}: give one condition on trajectories' columns")
    rows: dict[str, list[Any]] = table.to_pydict()
    if not rows["sample_id"]:
        raise InputError(f"no committed sample matches --where {where!r}: nothing to score")
    _require(
        rows,
        "text",
        "have no text: the lake has no tokenizer of their model (the trainer publishes it "
        "with weight version 0), so their tokens cannot be decoded",
    )
    if without_answers:
        rows["answer"] = [a or "" for a in rows["answer"]]
    else:
        _require(
            rows,
            "answer",
            "have no reference answer: the catalog's newest checkpoint has no prompt for "
            "them (let the run's dataflow process checkpoint), or pass --without-answers to score them "
            "against an empty answer (a reward that needs none: a judge's rubric, a length penalty)",
        )
    return rows


def _require(rows: dict[str, list[Any]], column: str, why: str) -> None:
    missing = [i for i, v in enumerate(rows[column]) if v is None]
    if missing:
        first = rows["sample_id"][missing[0]]
        raise InputError(f"{len(missing)} of {len(rows[column])} samples (first: {first}) {why}")


def _score(rows: dict[str, list[Any]], reward: str, max_chars: int) -> list[tuple[float, str]]:
    """(reward, reason) of each row, with the reward function built once per task type."""
    functions: dict[str, RewardFn] = {}
    out = []
    for text, answer, task_type in zip(rows["text"], rows["answer"], rows["task_type"], strict=True):
        if task_type not in functions:
            functions[task_type] = build_reward(task_type, max_chars, reward, key="--reward")
        scored = functions[task_type](text, answer)
        out.append((scored.value, scored.reason))
    return out


def _flush(writer: MetricsWriter) -> None:
    if writer.flush() is None and writer.pending:
        raise InputError("the lake refused the re-scored rows (see the warning above); nothing more was written")
