"""`lakeflow.open_lake(url).sql(q)`: the views and catalog tables of `lakeflow sql`, the same read-only
rules and limits, results as Arrow, pandas and Polars, on a local and an S3 lake; `import lakeflow`
stays light."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import lakeflow
from lakeflow.cli import main
from lakeflow.dataflow.service import DataflowService
from lakeflow.errors import LakeNotFoundError
from lakeflow.io import open_store
from lakeflow.lake.synth import SynthSpec, write_synthetic
from lakeflow.lakeview import QueryError
from lakeflow.notebook import MissingLibraryError
from tests.dataflow.helpers import config, group, set_trainer_version, write_groups


@pytest.fixture
def served_lake(tmp_path: Path) -> str:
    """A lake a dataflow process has served and checkpointed: its catalog tables exist."""
    url = str(tmp_path / "lake")
    store = open_store(url)
    write_groups(store, [group("policy", [1, 0, 1, 0]) for _ in range(4)])
    set_trainer_version(store, "policy", 0)
    service = DataflowService(store, config())
    service.start()
    service.run(iterations=2)
    service.close()  # checkpoints
    return url


def test_open_lake_has_the_views_and_catalog_tables_of_lakeflow_sql(served_lake: str) -> None:
    lake = lakeflow.open_lake(served_lake)
    cli = CliRunner().invoke(main, ["sql", "--lake", served_lake, "--format", "json", "SHOW TABLES"])
    assert cli.exit_code == 0, cli.output
    shown = sorted(json.loads(line)["name"] for line in cli.output.splitlines())
    assert lake.views == [n for n in shown if not n.startswith("_")]
    assert {"trajectories", "samples", "batches", "prompts", "groups", "trainer_steps"} <= set(lake.views)
    result = lake.sql("SELECT model_id, count(*) AS n FROM trajectories GROUP BY 1")
    assert result.arrow().to_pylist() == [{"model_id": "policy", "n": 16}]
    assert result.df().to_dict("records") == [{"model_id": "policy", "n": 16}]
    assert result.pl().to_dicts() == [{"model_id": "policy", "n": 16}]
    assert lake.sql("SELECT count(*) FROM groups").fetchall() == [(4,)]
    assert "policy" in repr(result) and len(result) == 1


def test_read_only_rules_and_limits_are_those_of_lakeflow_sql(served_lake: str, tmp_path: Path) -> None:
    lake = lakeflow.open_lake(served_lake)  # the default limit: refusals are never mistaken for a slow query
    with pytest.raises(QueryError, match="read-only"):
        lake.sql("CREATE TABLE t AS SELECT 1")
    with pytest.raises(QueryError, match="read-only"):
        lake.sql(f"COPY (SELECT 1) TO '{tmp_path / 'x.csv'}'")
    outside = tmp_path / "secret.csv"
    outside.write_text("a\n1\n")
    with pytest.raises(QueryError, match=r"disabled|Permission"):
        lake.sql(f"SELECT * FROM read_csv('{outside}')")
    runaway = lakeflow.open_lake(served_lake, timeout_s=0.5)  # a query that never ends: the limit must stop it
    with pytest.raises(QueryError, match=r"ran longer than its 0\.5 s limit"):
        runaway.sql("SELECT count(*) FROM range(10000000) a, range(10000000) b WHERE a.range + b.range = 7")
    small = lakeflow.open_lake(served_lake, memory_limit="2MB")
    with pytest.raises(QueryError, match="Out of Memory"):
        small.sql("SELECT list(response_ids) FROM trajectories, range(2000) GROUP BY model_id")


def test_refresh_sees_new_commits(served_lake: str) -> None:
    with lakeflow.open_lake(served_lake) as lake:
        assert lake.sql("SELECT count(*) FROM trajectories").fetchall() == [(16,)]
        write_groups(open_store(served_lake), [group("policy", [1, 1, 1, 1])])
        assert lake.sql("SELECT count(*) FROM trajectories").fetchall() == [(16,)]  # one read of the lake
        assert lake.refresh().sql("SELECT count(*) FROM trajectories").fetchall() == [(20,)]


@pytest.mark.s3
def test_open_lake_on_s3(s3_env: str, s3_url: str) -> None:
    write_synthetic(open_store(s3_url), SynthSpec(samples=64, group_size=8, prompt_tokens=8, response_tokens=8))
    lake = lakeflow.open_lake(s3_url)  # the endpoint from AWS_ENDPOINT_URL, as for the CLI
    assert lake.sql("SELECT count(*) AS n FROM trajectories").df()["n"].tolist() == [64]
    assert lake.sql("SELECT sum(len(response_ids)) AS t FROM trajectories").pl()["t"][0] > 0


def test_errors_are_one_line_and_say_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(LakeNotFoundError, match="no lake at"):
        lakeflow.open_lake(str(tmp_path / "nothing"))
    url = str(tmp_path / "lake")
    write_synthetic(open_store(url), SynthSpec(samples=8, group_size=8, prompt_tokens=8, response_tokens=8))
    result = lakeflow.open_lake(url).sql("SELECT 1 AS x")
    monkeypatch.setitem(sys.modules, "pandas", None)  # import fails as if not installed
    monkeypatch.setitem(sys.modules, "polars", None)
    with pytest.raises(MissingLibraryError, match="pip install pandas"):
        result.df()
    with pytest.raises(MissingLibraryError, match="pip install polars"):
        result.pl()
    assert result.arrow().to_pylist() == [{"x": 1}]


def test_import_lakeflow_is_light() -> None:
    heavy = "('duckdb', 'pyarrow', 'torch', 'deltalake')"
    probe = f"import sys, lakeflow; print(sorted(m for m in {heavy} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
