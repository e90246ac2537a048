"""The `turns` view of `lakeflow sql`: the turns advantage policies read, for every committed sample."""

from __future__ import annotations

import json

from lakeflow.io import Store
from lakeflow.lake import write_samples
from lakeflow.lakeview import connect_lake
from tests.lake.helpers import sample

COLUMNS = "sample_id, sequence_id, turn, token_start, token_end, reward, final, obs_hash, episode_reward"


def test_turns_of_episodes_per_turn_samples_and_plain_samples(store: Store) -> None:
    episode = {"turn_ends": [3, 8], "turn_rewards": [0.5, None], "turn_obs": ["a", "b"]}
    per_turn = [{"turn": i, "segment": i, "segments": 2, "turn_rewards": [0.0, 0.2]} for i in (0, 1)]
    write_samples(
        store,
        [
            sample(sample_id="s0", extra=json.dumps(episode), n=8, reward=1.0),
            sample(sample_id="s1", episode_id="e2", extra=json.dumps(per_turn[0]), reward=0.0),
            sample(sample_id="s2", episode_id="e2", extra=json.dumps(per_turn[1]), reward=0.0),
            sample(sample_id="s3", extra="not json", reward=0.5),
        ],
    )
    rows = connect_lake(store).sql(f"SELECT {COLUMNS} FROM turns ORDER BY sample_id, turn").to_pylist()
    assert [tuple(r.values()) for r in rows] == [
        ("s0", "s0", 0, 0, 3, 0.5, False, "a", 1.0),
        ("s0", "s0", 1, 3, 8, None, True, "b", 1.0),
        ("s1", "e2", 0, 0, None, 0.0, False, None, 0.0),
        ("s2", "e2", 1, 0, None, 0.2, True, None, 0.0),
        ("s3", "s3", 0, 0, None, None, True, None, 0.5),
    ]


def test_a_turn_reward_query_over_the_view(store: Store) -> None:
    extras = [{"turn_ends": [2, 4], "turn_rewards": [r, 1.0]} for r in (0.2, 0.0, 0.2)]
    rows = zip((0, 0, 1), extras, strict=True)
    write_samples(store, [sample(extra=json.dumps(e), policy_version=v, max_version=v) for v, e in rows])
    got = connect_lake(store).sql(
        "SELECT policy_version, avg(reward) AS first_turn FROM turns WHERE turn = 0 GROUP BY 1 ORDER BY 1"
    )
    assert got.to_pylist() == [{"policy_version": 0, "first_turn": 0.1}, {"policy_version": 1, "first_turn": 0.2}]
