"""The engine-trainer mismatch over a run, apart per rollout service (with its engine) and per lag (the
training step minus the weight version that sampled the tokens): from the `mismatch` metric table, each
service's engine from `rollout_stats`. Shown by `lakeflow report`; the columns are in docs/metrics.md."""

from __future__ import annotations

from dataclasses import dataclass

from lakeflow.lakeview import LakeQuery
from lakeflow.report.tables import html_table

_SQL = """
WITH m AS (  -- a step trained again (after a restart) counts once: its last row
  SELECT model_id, step, version, raas_id,
         arg_max(tokens, created_at) AS tokens, arg_max(mean, created_at) AS mean,
         arg_max(p99, created_at) AS p99, arg_max(max, created_at) AS max,
         arg_max(over_0_1, created_at) AS over_0_1, arg_max(over_1, created_at) AS over_1
  FROM mismatch GROUP BY model_id, step, version, raas_id
), engines AS (SELECT raas_id, arg_max(engine, created_at) AS engine FROM rollout_stats GROUP BY raas_id)
SELECT m.model_id, m.raas_id, coalesce(e.engine, '?') AS engine, m.step - m.version AS lag,
       min(m.version) AS first_version, max(m.version) AS last_version, sum(m.tokens) AS tokens,
       sum(m.mean * m.tokens) / sum(m.tokens) AS mean, max(m.p99) AS p99, max(m.max) AS max,
       sum(m.over_0_1 * m.tokens) / sum(m.tokens) AS over_0_1, sum(m.over_1 * m.tokens) / sum(m.tokens) AS over_1
FROM m LEFT JOIN engines e USING (raas_id)
WHERE m.tokens > 0
GROUP BY m.model_id, m.raas_id, engine, lag ORDER BY m.model_id, m.raas_id, lag
"""


@dataclass(frozen=True)
class MismatchSource:
    """The mismatch of the tokens one rollout service sampled `lag` versions before the step that trained
    them, over every measured step."""

    model_id: str
    raas_id: str
    engine: str  # rollout_stats.engine of the service; '?' where it wrote no window
    lag: int
    versions: tuple[int, int]  # the first and last behaviour version measured
    tokens: int
    mean: float  # token-weighted mean |trainer - engine| logprob, nats
    p99: float  # the largest step's p99
    max: float
    over_0_1: float  # token-weighted share beyond 0.1 nats
    over_1: float


def mismatch_by_source(lake: LakeQuery) -> list[MismatchSource]:
    """One row per (model, rollout service, lag) with measured tokens; empty for a lake without any."""
    return [
        MismatchSource(
            r["model_id"],
            r["raas_id"],
            r["engine"],
            r["lag"],
            (r["first_version"], r["last_version"]),
            r["tokens"],
            r["mean"],
            r["p99"],
            r["max"],
            r["over_0_1"],
            r["over_1"],
        )
        for r in lake.sql(_SQL).to_pylist()
    ]


_HEAD = ["model", "rollout service", "engine", "lag", "versions", "tokens", "mean", "p99 (largest)", "max"]
_HEAD += ["> 0.1 nats", "> 1 nat"]


def _cells(r: MismatchSource) -> list[str]:
    first, last = r.versions
    return [
        r.model_id,
        r.raas_id,
        r.engine,
        str(r.lag),
        f"{first}" if first == last else f"{first}-{last}",
        str(r.tokens),
        f"{r.mean:.4f}",
        f"{r.p99:.3f}",
        f"{r.max:.3f}",
        f"{r.over_0_1:.2%}",
        f"{r.over_1:.2%}",
    ]


def render_html(rows: list[MismatchSource]) -> str:
    """The report's table ('' when no step measured the mismatch: the section is left out)."""
    return html_table("Engine-trainer mismatch per rollout service", _HEAD, [_cells(r) for r in rows])
