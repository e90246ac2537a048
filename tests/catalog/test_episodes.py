"""The catalog counts a group by episodes, not samples: an episode stored as several samples (continuation
segments carry `extra.segment` > 0) completes a group of `n_samples` episodes, more episodes make it
oversized, and an `extra` that is not what a segment looks like starts an episode; checkpoints written
before `pending` counted episodes still load."""

from __future__ import annotations

import json

import pyarrow as pa

from lakeflow.catalog.policy import load_policy
from lakeflow.catalog.state import Catalog
from tests.catalog.helpers import samples, staged_objects

KEEP_ALL = load_policy("filter", "keep_all")
# `extra` values that start an episode: no segment, segment 0, a segment that is not a JSON integer > 0,
# and text that is not JSON
STARTS = ["{}", '{"segment": 0}', '{"segment": "2"}', '{"segment": 1.5}', '{"segment": -3}', '{"segment": true}',
          '{"segment": 1e30}', '{"segment": {"n": 1}}', '{"a": {"segment": 2}}', "[1]", "null", '"segment"',
          "garbage", "", "\x00", '{"segment": 1', '{"segment": 3} trailing']  # fmt: skip


def segments(per_episode: int, episodes: int) -> list[str]:
    """The `extra` of `episodes` episodes stored as `per_episode` samples each, in order."""
    return [
        json.dumps({"turn": i, "segment": i, "segments": per_episode})
        for _ in range(episodes)
        for i in range(per_episode)
    ]


def test_a_group_of_n_episodes_in_twice_as_many_samples_completes_and_is_kept() -> None:
    catalog = Catalog()
    catalog.ingest(samples("m", "g", 4, extra=segments(2, 2)))  # two of the four episodes so far
    assert catalog.complete_groups("m", 4, KEEP_ALL, 0.5).kept == 0
    catalog.ingest(samples("m", "g", 8, extra=segments(2, 4)).slice(4))
    assert catalog.sql("SELECT n, episodes FROM pending").to_pylist() == [{"n": 8, "episodes": 4}]
    assert catalog.drop_oversized("m", 4) == []
    done = catalog.complete_groups("m", 4, KEEP_ALL, 0.5)
    assert (done.kept, done.filtered) == (1, 0)
    assert catalog.sql("SELECT n, kept FROM groups").to_pylist() == [{"n": 8, "kept": True}]
    assert catalog.sql("SELECT n, len(sample_ids) AS ids FROM fresh").to_pylist() == [{"n": 8, "ids": 8}]
    assert staged_objects(catalog) == []
    catalog.close()


def test_more_episodes_than_n_samples_is_oversized() -> None:
    catalog = Catalog()
    catalog.ingest(samples("m", "g", 10, extra=segments(2, 5)))
    ((group_id, episodes, ids),) = catalog.drop_oversized("m", 4)
    assert (group_id, episodes, len(ids)) == ("g", 5, 10)
    assert catalog.sql("SELECT filter_policy, kept FROM groups").to_pylist() == [
        {"filter_policy": "oversized", "kept": False}
    ]
    catalog.close()


def test_a_group_of_only_continuation_segments_never_completes() -> None:
    catalog = Catalog()
    catalog.ingest(samples("m", "g", 6, extra=[json.dumps({"segment": 1 + i}) for i in range(6)]))
    assert catalog.drop_oversized("m", 4) == []
    assert catalog.complete_groups("m", 4, KEEP_ALL, 0.5).kept == 0
    assert catalog.sql("SELECT n, episodes FROM pending").to_pylist() == [{"n": 6, "episodes": 0}]
    catalog.close()


def test_an_extra_that_is_not_a_positive_integer_segment_starts_an_episode() -> None:
    catalog = Catalog()
    catalog.ingest(samples("m", "g", len(STARTS) + 1, extra=[*STARTS, '{"segment": 1}']))
    assert catalog.sql("SELECT n, episodes FROM pending").to_pylist() == [
        {"n": len(STARTS) + 1, "episodes": len(STARTS)}
    ]
    catalog.close()


def test_a_checkpoint_without_episodes_loads_with_one_episode_per_sample() -> None:
    catalog = Catalog()
    catalog.ingest(pa.concat_tables([samples("m", "g1", 3), samples("m", "g2", 2)]))
    old = catalog.export_tables()["pending"].drop_columns(["episodes"])  # as checkpoints were written before
    catalog.close()
    restored = Catalog()
    restored.import_tables({"pending": [old]})
    assert restored.sql("SELECT group_id, n, episodes FROM pending ORDER BY group_id").to_pylist() == [
        {"group_id": "g1", "n": 3, "episodes": 3},
        {"group_id": "g2", "n": 2, "episodes": 2},
    ]
    restored.ingest(samples("m", "g1", 4).slice(3))
    assert restored.complete_groups("m", 4, KEEP_ALL, 0.5).kept == 1
    restored.close()
