"""The `turns` view of `lakeflow sql`: one row per turn of every committed sample, read from its `extra`.

The rows are the ones advantage policies see for a batch (`lake/turns.py`, docs/catalog.md): an agent
episode stored as one sample gives one row per turn with its response-token span, the environment's
reward for it and the hash of the observation it answered; a per-turn sample is one turn of its episode
(`sequence_id` is then the episode); any other sample is one turn over its whole response. A Python
function over Arrow vectors (`lakeflow_turns`) reads each `extra` with the dataflow's own code, so the
view and the credit the trainer used cannot disagree; it runs only when a query reads the view.
"""

from __future__ import annotations

from typing import Any

import duckdb
import pyarrow as pa
from duckdb.func import PythonUDFType

from lakeflow.lake.turns import TURN_SCHEMA, sample_turns

FUNCTION = "lakeflow_turns"
_IDS = ("sample_id", "group_id", "episode_id")
_TURN = pa.struct([f for f in TURN_SCHEMA if f.name not in _IDS])
_SQL_TYPE = (
    "STRUCT(sequence_id VARCHAR, turn INTEGER, token_start INTEGER, token_end INTEGER, reward DOUBLE, "
    "final BOOLEAN, obs_hash VARCHAR)[]"
)


def _turns(sample_ids: Any, episode_ids: Any, extras: Any) -> pa.Array:
    out = []
    rows = zip(sample_ids.to_pylist(), episode_ids.to_pylist(), extras.to_pylist(), strict=True)
    for sample_id, episode_id, extra in rows:
        out.append([{"sequence_id": sample_id} | t for t in sample_turns(extra, episode_id)])
    return pa.array(out, pa.list_(_TURN))


def create_turns_view(con: duckdb.DuckDBPyConnection) -> None:
    """`lakeflow_turns(sample_id, episode_id, extra)` and the `turns` view over `samples` (before `con`
    is locked)."""
    con.create_function(
        FUNCTION, _turns, ["VARCHAR", "VARCHAR", "VARCHAR"], _SQL_TYPE, type=PythonUDFType.ARROW, side_effects=False
    )
    con.sql(
        "CREATE VIEW turns AS SELECT sample_id, group_id, episode_id, model_id, policy_version, "
        "reward AS episode_reward, unnest(t, recursive := true) "
        f"FROM (SELECT *, unnest({FUNCTION}(sample_id, episode_id, extra)) AS t FROM samples)"
    )
