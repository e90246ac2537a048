"""`lakeflow sql` has a time limit and a memory limit: a runaway query ends with one line, exit 1."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from lakeflow.cli import main
from lakeflow.io import open_store
from lakeflow.lake.synth import SynthSpec, write_synthetic


@pytest.fixture
def lake(tmp_path: Path) -> str:
    url = str(tmp_path / "lake")
    write_synthetic(open_store(url), SynthSpec(samples=256, group_size=8, prompt_tokens=64, response_tokens=64))
    return url


def test_long_query_is_stopped_at_its_time_limit(lake: str) -> None:
    # A cross join of 10^14 rows: it cannot finish; only the limit can end it.
    query = "SELECT count(*) FROM range(10000000) a, range(10000000) b WHERE a.range + b.range = 7"
    result = CliRunner().invoke(main, ["sql", "--lake", lake, "--timeout", "0.5", query])
    assert result.exit_code == 1
    assert "ran longer than its 0.5 s limit" in result.output and "Traceback" not in result.output


def test_query_past_its_memory_limit_fails_cleanly(lake: str) -> None:
    query = "SELECT list(response_ids) FROM trajectories GROUP BY model_id"
    result = CliRunner().invoke(main, ["sql", "--lake", lake, "--memory-limit", "2MB", query])
    assert result.exit_code == 1 and "Out of Memory" in result.output
    ok = CliRunner().invoke(main, ["sql", "--lake", lake, "--memory-limit", "1GB", query])
    assert ok.exit_code == 0, ok.output


def test_bad_memory_limit_is_a_usage_error(lake: str) -> None:
    result = CliRunner().invoke(main, ["sql", "--lake", lake, "--memory-limit", "banana", "SELECT 1"])
    assert result.exit_code == 2 and "--memory-limit" in result.output
