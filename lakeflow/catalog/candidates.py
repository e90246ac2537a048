"""The `candidates` view each policy kind reads, and the parameters the engine binds.

Kept in one place so the dataflow loop, `lakeflow policy check` and the docs agree on
what a policy sees (catalog/policies/README.md describes the same columns). The owners
stage these views with `StateDB.staged_candidates`, which binds the model.
"""

from __future__ import annotations

from typing import Any

from lakeflow.catalog.statedb import CANDIDATE_MODEL, identifier

# The columns of a group a policy sees (and those the pools share with `groups`).
GROUP_COLUMNS = "model_id, group_id, prompt_id, n, reward_mean, reward_std, zero_adv, policy_version, arrival"
# The table each group-policy kind reads: the staged complete groups, or a serving pool.
GROUP_TABLE = {"filter": "_complete", "staleness": "fresh", "fresh": "fresh", "replay": "replay"}
# The model's prompts without an outstanding task, with their statistics (curation policies).
PROMPT_CANDIDATES = f"""
    SELECT p.model_id, p.prompt_id, p.prompt_order, p.task_type, p.dataset,
           coalesce(s.groups, 0) AS groups, s.pass_ema, s.last_mean,
           coalesce(s.zero_var_streak, 0) AS zero_var_streak, coalesce(s.rejections, 0) AS rejections,
           coalesce(s.issued, 0) AS issued
    FROM prompts p LEFT JOIN prompt_stats s USING (model_id, prompt_id)
    WHERE p.model_id = {CANDIDATE_MODEL}
      AND p.prompt_id NOT IN (SELECT prompt_id FROM tasks WHERE model_id = {CANDIDATE_MODEL})"""


def group_candidates(table: str) -> str:
    """The SELECT of `candidates` over the model's groups in `table` (fresh, replay, or `_complete`)."""
    columns = GROUP_COLUMNS + (", served_count, last_served_step" if table == "replay" else "")
    return f"SELECT {columns} FROM {identifier(table)} WHERE model_id = {CANDIDATE_MODEL}"


def example_params(kind: str, model_id: str = "policy") -> dict[str, Any]:
    """Every parameter the engine binds for `kind`, with typical values (for dry runs)."""
    common: dict[str, Any] = {"model_id": model_id}
    if kind == "filter":
        return common
    if kind == "reward":
        return common | {"rescore": "example"}
    if kind == "advantage":
        return common | {"step": 10, "gamma": 1.0, "eps": 1e-6, "step_weight": 1.0}
    if kind == "curation":
        return common | {
            "n": 32,
            "round": 0,
            "solved_threshold": 0.95,
            "p_easy": 0.5,
            "p_hard": 0.5,
            "floor_easy": 0.05,
            "floor_hard": 0.05,
            "max_rejections": 20,
        }
    params = common | {"step": 10, "max_staleness": 4}
    if kind in ("fresh", "replay"):
        params["n"] = 32
    if kind == "replay":
        params["seed"] = 10
    return params
