"""The sample schema: its SQL twin, and validation errors that name the field and row."""

from __future__ import annotations

import math

import duckdb
import pyarrow as pa
import pytest

from lakeflow.catalog import read_sql
from lakeflow.errors import SampleValidationError
from lakeflow.lake.checks import row_problems
from lakeflow.lake.rules import duplicate_ids
from lakeflow.lake.schema import SAMPLE_SCHEMA, normalize_sample, samples_to_table, validate_table
from tests.lake.helpers import sample


def test_sql_schema_matches_arrow_schema() -> None:
    con = duckdb.connect()
    con.sql(read_sql("trajectories.sql"))
    sql_columns = [r[0] for r in con.sql("DESCRIBE trajectories").fetchall()]
    assert sql_columns == SAMPLE_SCHEMA.names
    table = samples_to_table([normalize_sample(sample(), 0)])
    con.register("written", table)
    # Every Arrow column inserts into the SQL table without a cast error.
    con.sql("INSERT INTO trajectories SELECT * FROM written")
    assert con.sql("SELECT count(*) FROM trajectories").fetchone() == (1,)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"reward": math.nan}, "row 7 .*'reward' must be a finite number"),
        ({"reward": math.inf}, "'reward' must be a finite number"),
        ({"reward": "1.0"}, "'reward' must be a finite number"),
        ({"response_logprobs": [-0.1, -0.2]}, "'response_logprobs' has 2 values but response_ids has 4"),
        ({"loss_mask": [1]}, "'loss_mask' has 1 values"),
        ({"policy_version": -1}, "'policy_version' must be a non-negative int"),
        ({"policy_version": 3, "max_version": 2}, "'policy_version' is newer than max_version"),
        ({"model_id": 5}, "'model_id' must be a string"),
        ({"finish_reason": "banana"}, "'finish_reason' must be one of"),
        ({"response_ids": "abc"}, "'response_ids' must be a list"),
        ({"colour": "red"}, "unknown field"),
        ({"sample_id": None}, r"missing field\(s\) \['sample_id'\]"),
    ],
)
def test_bad_sample_is_named(change: dict[str, object], message: str) -> None:
    with pytest.raises(SampleValidationError, match=message):
        normalize_sample(sample(**change), 7)


def test_missing_field_is_named() -> None:
    bad = sample()
    del bad["reward"]
    with pytest.raises(SampleValidationError, match=r"row 0: missing field\(s\) \['reward'\]"):
        normalize_sample(bad, 0)


def test_out_of_range_token_id_names_the_column() -> None:
    with pytest.raises(SampleValidationError, match="field 'response_ids'"):
        samples_to_table([normalize_sample(sample(response_ids=[2**40, 1, 2, 3]), 0)])


def _table(*samples: dict[str, object]) -> pa.Table:
    return samples_to_table([normalize_sample(s, i) for i, s in enumerate(samples)])


def test_validate_table_finds_the_bad_row() -> None:
    good = _table(sample(), sample(), sample())
    validate_table(good)
    rewards = good.column("reward").to_pylist()
    rewards[2] = math.nan
    with pytest.raises(SampleValidationError, match="row 2: field 'reward' is NaN"):
        validate_table(good.set_column(good.schema.get_field_index("reward"), "reward", pa.array(rewards)))
    with pytest.raises(SampleValidationError, match="row 1: duplicate sample_id"):
        validate_table(_table(sample(sample_id="a"), sample(sample_id="b"), sample(sample_id="b")))
    with pytest.raises(SampleValidationError, match="missing column"):
        validate_table(good.drop_columns(["reward"]))
    with pytest.raises(SampleValidationError, match="has type"):
        validate_table(good.set_column(0, "sample_id", pa.array([1, 2, 3])))
    ragged = good.column("loss_mask").to_pylist()
    ragged[1] = [1]
    index = good.schema.get_field_index("loss_mask")
    with pytest.raises(SampleValidationError, match="row 1: field 'loss_mask' length differs"):
        validate_table(good.set_column(index, SAMPLE_SCHEMA.field("loss_mask"), pa.array(ragged, pa.list_(pa.uint8()))))


def test_writer_and_ingest_share_one_rule_set() -> None:
    """The ingest's quarantine reason and the writer's error come from the same rule, in the same words."""
    good = _table(sample(), sample(), sample())
    rewards = good.column("reward").to_pylist()
    rewards[1] = math.inf
    bad = good.set_column(good.schema.get_field_index("reward"), "reward", pa.array(rewards))
    with pytest.raises(SampleValidationError, match="row 1: field 'reward' is NaN or infinite"):
        validate_table(bad)
    problems = dict(row_problems(bad))
    assert list(problems) == ["reward is NaN or infinite"]
    assert problems["reward is NaN or infinite"].tolist() == [False, True, False]


def test_duplicate_ids_keep_the_first_copy_and_null_ids_do_not_crash() -> None:
    ids = pa.table({"sample_id": pa.array(["a", "b", None, "b", "a"])})
    found = duplicate_ids(ids)
    assert found is not None
    assert found.rows.tolist() == [False, False, False, True, True]
    assert found.message == "row 0: duplicate sample_id a"
    assert duplicate_ids(pa.table({"sample_id": pa.array(["a", None, "b"])})) is None
