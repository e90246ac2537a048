"""The `candidates` view each policy kind reads, and the parameters the engine binds.

Kept in one place so the dataflow loop, `lakeflow policy check` and the docs agree on
what a policy sees (catalog/policies/README.md describes the same columns).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from lakeflow.catalog.policy import Policy, run_policy
from lakeflow.catalog.state import GROUP_COLUMNS, Catalog, quote

GROUP_TABLE = {"filter": "_complete", "staleness": "fresh", "fresh": "fresh", "replay": "replay"}


def group_candidates(catalog: Catalog, table: str, model_id: str) -> None:
    """`candidates` = the model's groups in `table` (fresh, replay, or the staged complete groups)."""
    columns = GROUP_COLUMNS + (", served_count, last_served_step" if table == "replay" else "")
    catalog.con.sql(
        f"CREATE OR REPLACE TEMP VIEW candidates AS SELECT {columns} FROM {table} WHERE model_id = {quote(model_id)}"
    )


def prompt_candidates(catalog: Catalog, model_id: str) -> None:
    """`candidates` = the model's prompts without an outstanding task, with their statistics."""
    m = quote(model_id)
    catalog.con.sql(
        f"""CREATE OR REPLACE TEMP VIEW candidates AS
        SELECT p.model_id, p.prompt_id, p.prompt_order, p.task_type, p.dataset,
               coalesce(s.groups, 0) AS groups, s.pass_ema, s.last_mean,
               coalesce(s.zero_var_streak, 0) AS zero_var_streak, coalesce(s.rejections, 0) AS rejections,
               coalesce(s.issued, 0) AS issued
        FROM prompts p LEFT JOIN prompt_stats s USING (model_id, prompt_id)
        WHERE p.model_id = {m} AND p.prompt_id NOT IN (SELECT prompt_id FROM tasks WHERE model_id = {m})"""
    )


def example_params(kind: str, model_id: str = "policy") -> dict[str, Any]:
    """Every parameter the engine binds for `kind`, with typical values (for dry runs)."""
    common: dict[str, Any] = {"model_id": model_id}
    if kind == "filter":
        return common
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


def stage_empty(catalog: Catalog, kind: str) -> None:
    """An empty `candidates` view of the right shape for `kind` (for `lakeflow policy check`)."""
    if kind == "curation":
        prompt_candidates(catalog, "policy")
    elif kind == "filter":
        catalog.stage_complete("policy", 1)
    else:
        group_candidates(catalog, GROUP_TABLE[kind], "policy")


def check_policy(policy: Policy, timeout_s: float = 30.0) -> pa.Table:
    """Parse and dry-run `policy` against an empty catalog of the right shape; PolicyError when it is
    not one SELECT, uses parameters the engine does not bind, fails, or returns the wrong columns.
    The dataflow process checks every configured policy this way before it serves anything."""
    catalog = Catalog()
    try:
        stage_empty(catalog, policy.kind)
        result = run_policy(catalog.con, policy, example_params(policy.kind), timeout_s)
        if policy.kind == "filter":
            catalog.finish_complete([], policy.name, 0.5)
        return result
    finally:
        catalog.close()
