"""The catalog's group statistics: no finite reward can overflow them (DuckDB's stddev_samp raises on
overflow, which would stop the dataflow loop), and ordinary groups get the ordinary sample std."""

from __future__ import annotations

import math

import duckdb
import pytest

from lakeflow.catalog.completion import SAFE_REWARD_STD


def _std(rewards: list[float]) -> float:
    (value,) = duckdb.sql(f"SELECT {SAFE_REWARD_STD} FROM (SELECT {rewards}::DOUBLE[] AS rewards)").fetchall()[0]
    return float(value)


def test_group_std_of_huge_finite_rewards_does_not_overflow() -> None:
    with pytest.raises(duckdb.OutOfRangeException):
        duckdb.sql("SELECT list_stddev_samp([1e308, -1e308, 1.0])").fetchall()  # what it replaces
    assert math.isfinite(_std([1e308, -1e308, 1.0])) and _std([1e308, 1e308]) == 0.0
    assert _std([1e300, -1e300]) == pytest.approx(math.sqrt(2) * 1e300)


def test_group_std_of_ordinary_rewards_is_the_sample_std() -> None:
    for rewards in ([1.0, 0.0, 1.0, 0.0], [0.1, 0.2, 0.7], [3.0, 3.0], [0.0, 0.0], [-5.0, 2.5, 1e-3]):
        (expected,) = duckdb.sql(f"SELECT list_stddev_samp({rewards}::DOUBLE[])").fetchall()[0]
        assert _std(rewards) == pytest.approx(expected, rel=1e-12, abs=0)
