"""The sample schema: its SQL twin, and validation errors that name the field and row."""

from __future__ import annotations

import math

import duckdb
import pyarrow as pa
import pytest

from lakeflow.catalog import read_sql
from lakeflow.errors import SampleValidationError
from lakeflow.lake.checks import row_problems
from lakeflow.lake.rules import bad_logprobs, bad_loss_mask, duplicate_ids
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


def test_every_field_a_trainer_reads_is_bounded_in_the_writer_and_the_ingest() -> None:
    """The writer raises and the ingest quarantines, in the same words: logprobs NaN, infinite, positive
    or absurd; loss_mask other than 0/1; an empty prompt; a reward beyond the bound."""
    good = _table(sample(), sample(), sample())
    lp, mask = good.column("response_logprobs").to_pylist(), good.column("loss_mask").to_pylist()
    cases = {
        "response_logprobs has values that are NaN, infinite or outside [-1000, 0.001]": [
            ("response_logprobs", [[math.nan, *lp[0][1:]], [5.0, *lp[1][1:]], [-1e30, *lp[2][1:]]], 0),
        ],
        "loss_mask has values other than 0 and 1": [("loss_mask", [mask[0], [2, *mask[1][1:]], mask[2]], 1)],
        "prompt_ids is empty": [("prompt_ids", [[1], [], [2]], 1)],
    }
    for reason, edits in cases.items():
        for column, values, first in edits:
            index = good.schema.get_field_index(column)
            bad = good.set_column(
                index, SAMPLE_SCHEMA.field(column), pa.array(values, SAMPLE_SCHEMA.field(column).type)
            )
            with pytest.raises(SampleValidationError, match=f"row {first}: field '{column}'"):
                validate_table(bad)
            assert reason in dict(row_problems(bad)), row_problems(bad)
    huge = good.set_column(good.schema.get_field_index("reward"), "reward", pa.array([1.0, 2e6, 1e308]))
    assert dict(row_problems(huge))["reward is outside [-1e+06, 1e+06]"].tolist() == [False, True, True]
    assert dict(row_problems(huge, reward_bound=1e7))["reward is outside [-1e+07, 1e+07]"].tolist() == [
        False,
        False,
        True,
    ]
    with pytest.raises(SampleValidationError, match="row 2: field 'reward' is outside"):
        validate_table(huge)  # the writer refuses what no config accepts (above 1e12)


def test_list_rules_read_sliced_chunks_and_nulls() -> None:
    column = pa.array([[-0.1], [math.nan], [-0.2, 5.0], [-0.3], [None]], pa.list_(pa.float32())).slice(1)
    found = bad_logprobs(pa.table({"response_logprobs": column}))
    assert found is not None and found.rows.tolist() == [True, True, False, True]
    assert bad_loss_mask(pa.table({"loss_mask": pa.array([[0, 1], [1]], pa.list_(pa.uint8()))})) is None
