"""Agent episodes per weight version, from the samples' `extra` (workflow `agent`): tool-call rate,
turns per episode, tool errors. Shown by `lakeflow report` and `lakeflow status --agents`; the keys
are documented in docs/agent-episodes.md. And the agentic evaluation's rows (`eval` with `ends`): held-out
pass@1, pass@k, turns, tool calls and how episodes ended, per version."""

from __future__ import annotations

from dataclasses import dataclass

from lakeflow.lakeview import LakeQuery
from lakeflow.report.tables import html_table
from lakeflow.text import text_table

_SQL = """
SELECT model_id, policy_version, count(*) AS samples,
       avg(CAST(json_extract(extra, '$.turns') AS DOUBLE)) AS turns,
       sum((SELECT coalesce(sum(CAST(value AS INTEGER)), 0) FROM json_each(json_extract(extra, '$.tool_calls'))))
         / nullif(sum(CAST(json_extract(extra, '$.turns') AS DOUBLE)), 0) AS calls_per_turn,
       avg(CAST(json_extract(extra, '$.tool_errors') AS DOUBLE)) AS errors,
       avg(CAST(json_extract(extra, '$.malformed_calls') AS DOUBLE)) AS malformed
FROM trajectories
WHERE json_extract(extra, '$.turns') IS NOT NULL
GROUP BY model_id, policy_version ORDER BY model_id, policy_version
"""


@dataclass(frozen=True)
class AgentVersion:
    """What one weight version's agent episodes did (per sample: one per episode, or per turn)."""

    model_id: str
    version: int
    samples: int
    turns_per_episode: float
    tool_calls_per_turn: float  # the tool-call rate
    tool_errors_per_episode: float
    malformed_per_episode: float


def agent_by_version(lake: LakeQuery) -> list[AgentVersion]:
    """One row per (model, version) that has agent samples; empty for a lake without any."""
    return [
        AgentVersion(
            r["model_id"],
            r["policy_version"],
            r["samples"],
            r["turns"] or 0.0,
            r["calls_per_turn"] or 0.0,
            r["errors"] or 0.0,
            r["malformed"] or 0.0,
        )
        for r in lake.sql(_SQL).to_pylist()
    ]


_HEAD = ["model", "version", "samples", "turns/episode", "tool calls/turn", "tool errors/episode", "malformed/episode"]


def _cells(r: AgentVersion) -> list[str]:
    return [
        r.model_id,
        str(r.version),
        str(r.samples),
        f"{r.turns_per_episode:.2f}",
        f"{r.tool_calls_per_turn:.2f}",
        f"{r.tool_errors_per_episode:.2f}",
        f"{r.malformed_per_episode:.2f}",
    ]


def render_text(rows: list[AgentVersion]) -> list[str]:
    """The per-version table for `lakeflow status --agents`."""
    if not rows:
        return ["agent episodes: none in the lake"]
    return ["agent episodes per weight version:", *text_table(_HEAD, [_cells(r) for r in rows])]


def render_html(rows: list[AgentVersion]) -> str:
    """The report's table ('' when the lake has no agent samples: the section is left out)."""
    return html_table("Agent episodes", _HEAD, [_cells(r) for r in rows])


_EVAL_SQL = """
SELECT model_id, dataset, policy_version, arg_max(pass_at_1, created_at) AS p1, arg_max(k, created_at) AS k,
       arg_max(pass_at_k, created_at) AS pk, arg_max(turns_mean, created_at) AS turns,
       arg_max(tool_calls_mean, created_at) AS calls, arg_max(ends, created_at) AS ends
FROM eval WHERE ends IS NOT NULL
GROUP BY ALL ORDER BY model_id, dataset, policy_version
"""
_EVAL_HEAD = ["model", "held-out set", "version", "pass@1", "pass@k", "turns/episode", "tool calls/episode", "ends"]


def agent_evals(lake: LakeQuery) -> list[list[str]]:
    """The report's rows of the agentic evaluation (a re-evaluated version: its last row)."""
    return [
        [
            r["model_id"],
            r["dataset"],
            str(r["policy_version"]),
            f"{r['p1']:.3f}",
            f"{r['pk']:.3f} (k={r['k']})",
            f"{r['turns']:.2f}",
            f"{r['calls']:.2f}",
            r["ends"],
        ]
        for r in lake.sql(_EVAL_SQL).to_pylist()
    ]


def render_eval_html(rows: list[list[str]]) -> str:
    """The report's agentic evaluation table ('' without agent evaluations)."""
    return html_table("Agent evaluation (held-out episodes)", _EVAL_HEAD, rows)
