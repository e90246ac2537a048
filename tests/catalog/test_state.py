"""The dataflow catalog (`catalog/state.py`): ingest refuses repeated and late samples, completion
files groups by the filter policy, nothing staged outlives a call (also when a policy fails), and a
file-backed catalog reopens with its rows."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest

from lakeflow.catalog.policy import load_policy
from lakeflow.catalog.state import Catalog
from lakeflow.errors import PolicyError
from tests.catalog.helpers import SHARD, samples, staged_objects

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_ingest_refuses_known_repeated_and_late_samples() -> None:
    catalog = Catalog()
    first = catalog.ingest(samples("m", "g1", 2))
    assert (first.rows, first.duplicates, first.late) == (2, [], [])
    again = catalog.ingest(pa.concat_tables([samples("m", "g1", 3), samples("m", "g2", 1), samples("m", "g2", 1)]))
    assert (again.rows, sorted(again.duplicates or []), again.late) == (2, ["g1-0", "g1-1", "g2-0"], [])
    assert catalog.sql("SELECT group_id, n FROM pending ORDER BY group_id").to_pylist() == [
        {"group_id": "g1", "n": 3},
        {"group_id": "g2", "n": 1},
    ]
    catalog.complete_groups("m", 3, load_policy("filter", "keep_all"), 0.5)
    late = catalog.ingest(samples("m", "g1", 4).slice(3))  # a fourth sample of a complete group
    assert (late.rows, late.late) == (0, ["g1-3"])
    assert staged_objects(catalog) == []
    catalog.close()


def test_completion_files_every_group_and_keeps_what_the_filter_keeps() -> None:
    catalog = Catalog()
    catalog.add_shard(SHARD, "k", "m", 8, NOW)
    catalog.ingest(pa.concat_tables([samples("m", "flat", 4, rewards=[1.0] * 4), samples("m", "varied", 4)]))
    done = catalog.complete_groups("m", 4, load_policy("filter", "drop_zero_adv"), 0.5)
    assert (done.kept, done.filtered, done.tasks) == (1, 1, [("m", "t-flat"), ("m", "t-varied")])
    assert catalog.sql("SELECT group_id, kept, zero_adv FROM groups ORDER BY group_id").to_pylist() == [
        {"group_id": "flat", "kept": False, "zero_adv": True},
        {"group_id": "varied", "kept": True, "zero_adv": False},
    ]
    assert catalog.sql("SELECT group_id FROM fresh").to_pylist() == [{"group_id": "varied"}]
    assert catalog.sql("SELECT count(*) AS n FROM pending").to_pylist() == [{"n": 0}]
    assert catalog.complete_groups("m", 4, load_policy("filter", "keep_all"), 0.5).kept == 0  # none left
    assert staged_objects(catalog) == []
    catalog.close()


def test_a_failing_policy_leaves_nothing_staged(tmp_path: Path) -> None:
    broken = tmp_path / "broken.sql"
    broken.write_text("SELECT nope FROM candidates")
    catalog = Catalog()
    catalog.ingest(samples("policy", "g1", 4))
    for _ in range(2):  # a table or view left behind by the first call would fail the second
        with pytest.raises(PolicyError, match="nope"):
            catalog.check_policy(load_policy("filter", str(broken)))
        assert staged_objects(catalog) == []
    assert catalog.check_policy(load_policy("filter", "keep_all")).to_pylist() == [{"group_id": "g1"}]
    done = catalog.complete_groups("policy", 4, load_policy("filter", str(broken)), 0.5)  # falls back to keep_all
    assert done.kept == 1 and catalog.policy_failures == {"filter:broken": 1}
    assert staged_objects(catalog) == []
    catalog.close()


def test_file_backed_catalog_reopens_with_its_rows(tmp_path: Path) -> None:
    path = str(tmp_path / "catalog.duckdb")
    catalog = Catalog(path)
    catalog.add_shard(SHARD, "k", "m", 4, NOW)
    catalog.close()
    again = Catalog(path)
    assert again.sql("SELECT count(*) AS n FROM shards").column("n")[0].as_py() == 1
    again.close()
