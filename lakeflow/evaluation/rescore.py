"""`lakeflow rescore`: score stored samples again with another reward, without generating them again.

The samples are read as `lakeflow sql` reads them (the `trajectories` view: committed shards less the
quarantined, `response_text` decoded by the model's own tokenizer), chosen by a SQL condition, joined
with their reference answers from the dataflow catalog's `prompts` (its newest checkpoint), and scored by
a reward function (a shipped name, `package.module:attr` or an entry point, as a pool's `reward`) or by a
pool's judge or reward model (`rescore_models.py`: the rollout service's own scorers, over the catalog's
prompts). The new rewards are appended to the lake's `rescores` table (one row per sample: the new reward and reason
beside the stored one, under the re-scoring's name), with the metric tables' commit protocol: a re-scoring
killed midway leaves only whole, committed objects (a model's rows are committed every 30 s). A sample a
judge or reward model gives no reward is written with a NULL reward and the reason, never a 0. So two
rewards can be compared on identical rollouts:

    SELECT name, avg(reward), avg(stored_reward) FROM rescores GROUP BY name
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lakeflow.dataflow.status import checkpoint_tables
from lakeflow.errors import InputError
from lakeflow.evaluation.rescore_models import ModelReward, Stored, build_scorer, score_samples
from lakeflow.io import Store
from lakeflow.lake.metrics import MetricsWriter
from lakeflow.lakeview import QueryError, connect_lake
from lakeflow.raas.config.judge import JudgeConfig
from lakeflow.raas.outcome import RewardFn
from lakeflow.raas.rewards import build_reward

COLUMNS = [
    "sample_id", "model_id", "group_id", "prompt_id", "task_type", "finish_reason", "stored_reward", "text",
    "prompt", "answer",
]  # fmt: skip
_FLUSH_ROWS = 50_000  # most rows per committed object
_FLUSH_S = 30.0  # a model's slower rows are committed at least this often
_MODEL_CHUNK = 256  # samples handed to a judge or reward model at once (whole groups)


@dataclass(frozen=True)
class Rescored:
    """What a re-scoring did: samples scored, the mean new and stored rewards, where the time went."""

    name: str
    samples: int
    reward_mean: float  # over the samples that have a new reward
    stored_mean: float
    read_s: float  # the query: shards read, response text decoded
    score_s: float  # the reward over every sample
    write_s: float  # the rows committed to the `rescores` table
    failed: int = 0  # samples a judge or reward model gave no reward (written with reward NULL)


def rescore(
    store: Store,
    reward: str | ModelReward,
    where: str = "true",
    name: str | None = None,
    without_answers: bool = False,
    max_chars: int = 8192,
) -> Rescored:
    """Score the samples of `store` that `where` (a condition on `trajectories`' columns) chooses with
    `reward` (a reward function's name, or a pool's judge or reward-model section); append the rows to
    `rescores`. InputError for more than one condition, samples whose text, answer or (for a model) prompt is
    missing, or none chosen; QueryError for a condition DuckDB refuses."""
    started = time.perf_counter()
    rows = _read(store, where, without_answers, needs_prompt=not isinstance(reward, str))
    read_s = time.perf_counter() - started
    spec = reward if isinstance(reward, str) else _spec(reward)
    label = name or (reward if isinstance(reward, str) else _model_name(reward))
    writer = MetricsWriter(store, "rescores", "rescore", flush_s=_FLUSH_S)
    n = len(rows["sample_id"])
    scored: list[tuple[float | None, str]] = []
    score_s = write_s = 0.0
    scorer = None if isinstance(reward, str) else build_scorer(reward, max_chars)  # a model is loaded once
    functions: dict[str, RewardFn] = {}
    try:
        for lo, hi in _chunks(rows, _FLUSH_ROWS if scorer is None else _MODEL_CHUNK):
            started = time.perf_counter()
            if scorer is None:
                part = _score(rows, lo, hi, functions, str(reward), max_chars)
            else:
                part = score_samples(scorer, _stored(rows, lo, hi))
            score_s += time.perf_counter() - started
            started = time.perf_counter()
            for i, (value, reason) in enumerate(part, start=lo):
                writer.add(_row(rows, i, label, spec, value, reason))
            scored += part
            if writer.pending >= _FLUSH_ROWS:
                _flush(writer)
            write_s += time.perf_counter() - started
        started = time.perf_counter()
        _flush(writer)
        write_s += time.perf_counter() - started
    finally:
        if scorer is not None:
            scorer.close()
    values = [v for v, _ in scored if v is not None]
    return Rescored(
        label,
        n,
        sum(values) / len(values) if values else float("nan"),
        sum(rows["stored_reward"]) / n,
        round(read_s, 3),
        round(score_s, 3),
        round(write_s, 3),
        n - len(values),
    )


def _model_name(reward: ModelReward) -> str:
    """The default name of a model's re-scoring: `judge:<model>` or `reward_model:<model>`."""
    model = reward.model_name if isinstance(reward, JudgeConfig) else reward.model
    return f"{reward.type}:{model}"


def _spec(reward: ModelReward) -> str:
    """The section as `reward_spec` records it: JSON of its type and the fields given (no API key is in it)."""
    return json.dumps({"type": reward.type, **reward.model_dump(mode="json", exclude_defaults=True)}, sort_keys=True)


def _row(rows: dict[str, list[Any]], i: int, label: str, spec: str, value: float | None, reason: str) -> dict[str, Any]:
    return {
        "model_id": rows["model_id"][i],
        "name": label,
        "reward_spec": spec,
        "sample_id": rows["sample_id"][i],
        "prompt_id": rows["prompt_id"][i],
        "reward": value,
        "reason": reason,
        "stored_reward": rows["stored_reward"][i],
    }


def _chunks(rows: dict[str, list[Any]], size: int) -> list[tuple[int, int]]:
    """[lo, hi) ranges of about `size` rows that never split a group (rows are ordered by group)."""
    keys = list(zip(rows["model_id"], rows["group_id"], strict=True))
    out: list[tuple[int, int]] = []
    lo = 0
    for i in range(1, len(keys) + 1):
        if i == len(keys) or (i - lo >= size and keys[i] != keys[i - 1]):
            out.append((lo, i))
            lo = i
    return out


def _stored(rows: dict[str, list[Any]], lo: int, hi: int) -> list[Stored]:
    names = ("sample_id", "model_id", "group_id", "prompt_id", "task_type", "prompt", "answer", "text", "finish_reason")
    return [Stored(**{c: rows[c][i] for c in names}) for i in range(lo, hi)]


def _read(store: Store, where: str, without_answers: bool, needs_prompt: bool) -> dict[str, list[Any]]:
    """The chosen samples' columns (COLUMNS), each a list."""
    tables, _ = checkpoint_tables(store)  # the catalog's prompts hold the reference answers
    prompts = tables.get("prompts")
    if prompts is None:
        prompts = pa.table({c: pa.array([], pa.string()) for c in ("model_id", "prompt_id", "prompt", "answer")})
    lake = connect_lake(store, tables={"_prompts": prompts.select(["model_id", "prompt_id", "prompt", "answer"])})
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
            "SELECT c.sample_id, c.model_id, c.group_id, c.prompt_id, c.task_type, c.finish_reason, "
            "c.reward AS stored_reward, c.response_text AS text, p.prompt, p.answer FROM chosen c "
            "LEFT JOIN _prompts p ON p.model_id = c.model_id AND p.prompt_id = c.prompt_id "
            "ORDER BY c.model_id, c.group_id, c.sample_id"  # a group's samples adjacent: a judge sees them together
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
    if needs_prompt:
        _require(
            rows,
            "prompt",
            "have no prompt in the catalog's newest checkpoint, which a judge or reward model reads with the "
            "answer (let the run's dataflow process checkpoint)",
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


def _score(
    rows: dict[str, list[Any]], lo: int, hi: int, functions: dict[str, RewardFn], reward: str, max_chars: int
) -> list[tuple[float | None, str]]:
    """(reward, reason) of rows [lo, hi) by the reward function, built once per task type into `functions`."""
    out: list[tuple[float | None, str]] = []
    for i in range(lo, hi):
        task_type = rows["task_type"][i]
        if task_type not in functions:
            functions[task_type] = build_reward(task_type, max_chars, reward, key="--reward")
        scored = functions[task_type](rows["text"][i], rows["answer"][i])
        out.append((scored.value, scored.reason))
    return out


def _flush(writer: MetricsWriter) -> None:
    if writer.flush() is None and writer.pending:
        raise InputError("the lake refused the re-scored rows (see the warning above); nothing more was written")
