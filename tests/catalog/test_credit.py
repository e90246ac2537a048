"""Advantage policies (turn-level credit) over a batch's samples and turns, against hand-computed values."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from statistics import mean, stdev

import pyarrow as pa
import pytest

from lakeflow.catalog.credit import CREDIT_SAMPLES
from lakeflow.catalog.policy import load_policy
from lakeflow.catalog.sqlfiles import shipped_policies
from lakeflow.catalog.state import Catalog, check_policy
from lakeflow.dataflow.credit import credit_columns
from lakeflow.errors import PolicyError
from lakeflow.lake.turns import turns_table

EPS = 1e-6
PARAMS = {"model_id": "policy", "step": 3, "gamma": 0.5, "eps": EPS, "step_weight": 1.0}
# One group, two agent episodes of two turns each. s0: turn rewards 0.5, none; episode reward 1.
# s1: turn rewards 0.0, 0.2; episode reward 0. Both first turns answered the same observation "a".
EXTRAS = [
    {"turn_ends": [3, 8], "turn_rewards": [0.5, None], "turn_obs": ["a", "b"]},
    {"turn_ends": [4, 9], "turn_rewards": [0.0, 0.2], "turn_obs": ["a", "c"]},
]
# Discounted returns with gamma 0.5 (the episode's reward counts on its last turn):
# s0: G1 = 0 + 1 = 1, G0 = 0.5 + 0.5 * 1 = 1.0;  s1: G1 = 0.2 + 0 = 0.2, G0 = 0 + 0.5 * 0.2 = 0.1
RETURNS = {("s0", 0): 1.0, ("s0", 1): 1.0, ("s1", 0): 0.1, ("s1", 1): 0.2}


@pytest.fixture
def catalog() -> Iterator[Catalog]:
    c = Catalog()
    yield c
    c.close()


def _batch(extras: list[dict[str, object]], rewards: list[float], episodes: list[str] | None = None) -> pa.Table:
    n = len(extras)
    ids = [f"s{i}" for i in range(n)]
    std = stdev(rewards) if n > 1 else 1.0
    return pa.table(
        {
            "sample_id": ids,
            "group_id": ["g0"] * n,
            "episode_id": episodes or [f"e{i}" for i in range(n)],
            "prompt_id": ["p0"] * n,
            "kind": ["fresh"] * n,
            "policy_version": [0] * n,
            "reward": rewards,
            "group_mean": [mean(rewards)] * n,
            "group_std": [std] * n,
            "group_size": [n] * n,
        },
        schema=CREDIT_SAMPLES,
    )


def _run(catalog: Catalog, name: str, samples: pa.Table, extras: list[dict[str, object]]) -> dict[tuple, float]:
    turns = turns_table(
        samples.column("sample_id").to_pylist(),
        samples.column("group_id").to_pylist(),
        samples.column("episode_id").to_pylist(),
        [json.dumps(e) for e in extras],
    )
    answer = catalog.credit.advantages("policy", load_policy("advantage", name), PARAMS, samples, turns)
    return {(r["sample_id"], r["turn"]): r["advantage"] for r in answer.to_pylist()}


def test_episode_credit_is_the_group_normalised_reward(catalog: Catalog) -> None:
    got = _run(catalog, "episode", _batch(EXTRAS, [1.0, 0.0]), EXTRAS)
    std = stdev([1.0, 0.0])
    assert got == pytest.approx({("s0", None): 0.5 / (std + EPS), ("s1", None): -0.5 / (std + EPS)})


def test_turn_return_discounts_later_rewards_and_normalises_over_the_group(catalog: Catalog) -> None:
    got = _run(catalog, "turn_return", _batch(EXTRAS, [1.0, 0.0]), EXTRAS)
    m, s = mean(RETURNS.values()), stdev(RETURNS.values())
    assert got == pytest.approx({k: (g - m) / (s + EPS) for k, g in RETURNS.items()})


def test_turn_group_norm_compares_turns_of_the_same_index(catalog: Catalog) -> None:
    got = _run(catalog, "turn_group_norm", _batch(EXTRAS, [1.0, 0.0]), EXTRAS)
    expected = {}
    for turn in (0, 1):
        same = [RETURNS[(s, turn)] for s in ("s0", "s1")]
        for s in ("s0", "s1"):
            expected[(s, turn)] = (RETURNS[(s, turn)] - mean(same)) / (stdev(same) + EPS)
    assert got == pytest.approx(expected)
    assert got[("s0", 0)] > 0 > got[("s1", 0)]


def test_step_groups_add_the_advantage_among_turns_that_saw_the_same_observation(catalog: Catalog) -> None:
    got = _run(catalog, "step_group", _batch(EXTRAS, [1.0, 0.0]), EXTRAS)
    episode = 0.5 / (stdev([1.0, 0.0]) + EPS)
    step = (1.0 - 0.55) / (stdev([1.0, 0.1]) + EPS)  # the two first turns answered "a"; the others are alone
    assert got == pytest.approx(
        {("s0", 0): episode + step, ("s0", 1): episode, ("s1", 0): -episode - step, ("s1", 1): -episode}
    )


def test_per_turn_samples_are_one_turn_each_and_chain_by_episode(catalog: Catalog) -> None:
    # the episode of s0 stored as two samples (per_turn_samples), the one of s2 too
    extras = [
        {"turn": 0, "segment": 0, "segments": 2, "turn_rewards": [0.5, None], "turn_ends": [3, 5]},
        {"turn": 1, "segment": 1, "segments": 2, "turn_rewards": [0.5, None], "turn_ends": [3, 5]},
        {"turn": 0, "segment": 0, "segments": 2, "turn_rewards": [0.0, 0.2], "turn_ends": [4, 5]},
        {"turn": 1, "segment": 1, "segments": 2, "turn_rewards": [0.0, 0.2], "turn_ends": [4, 5]},
    ]
    samples = _batch(extras, [1.0, 1.0, 0.0, 0.0], episodes=["e0", "e0", "e1", "e1"])
    got = _run(catalog, "turn_group_norm", samples, extras)
    # the same returns as the two whole-episode samples above, one turn per sample
    flat = {("s0", 0): 1.0, ("s1", 1): 1.0, ("s2", 0): 0.1, ("s3", 1): 0.2}
    assert got[("s0", 0)] == pytest.approx((flat[("s0", 0)] - 0.55) / (stdev([1.0, 0.1]) + EPS))
    assert got[("s3", 1)] == pytest.approx((0.2 - 0.6) / (stdev([1.0, 0.2]) + EPS))
    assert set(got) == set(flat)


def test_samples_without_turns_are_one_turn_over_the_whole_response(catalog: Catalog) -> None:
    extras: list[dict[str, object]] = [{}, {"turn_ends": "garbage"}]
    got = _run(catalog, "turn_return", _batch(extras, [1.0, 0.0]), extras)
    assert got == pytest.approx(
        {("s0", 0): 0.5 / (stdev([1.0, 0.0]) + EPS), ("s1", 0): -0.5 / (stdev([1.0, 0.0]) + EPS)}
    )


def test_the_answer_becomes_per_turn_lists_with_turn_ends() -> None:
    turns = turns_table(["s0", "s1", "s2"], ["g"] * 3, ["e0", "e1", "e2"], [json.dumps(EXTRAS[0]), "{}", "{}"])
    answer = pa.table({"sample_id": ["s0", "s0", "s1"], "turn": [1, 0, None], "advantage": [2.0, -1.0, 0.5]})
    values, ends = credit_columns(["s0", "s1", "s2"], turns, answer)
    assert values == [[-1.0, 2.0], [0.5], None] and ends == [[3, 8], None, None]


def test_every_shipped_advantage_policy_passes_the_check() -> None:
    names = sorted(shipped_policies("advantage"))
    assert names == ["episode", "step_group", "turn_group_norm", "turn_return"]
    for name in names:
        result = check_policy(load_policy("advantage", name))
        assert result.column_names == ["sample_id", "turn", "advantage"] and result.num_rows >= 2


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        ("SELECT 'nobody' AS sample_id, NULL::INTEGER AS turn, 1.0 AS advantage", "not candidates"),
        ("SELECT sample_id, NULL::INTEGER AS turn, 'nan'::DOUBLE AS advantage FROM candidates", "NaN or infinite"),
        ("SELECT sample_id, turn, 1.0 AS advantage FROM turns UNION ALL SELECT 's0', 0, 1.0", "twice"),
        ("SELECT sample_id, 7 AS turn, 1.0 AS advantage FROM candidates", "turn(s) the sample does not have"),
        ("SELECT sample_id, 'x' AS turn, 1.0 AS advantage FROM candidates", "wrong types"),
        ("SELECT sample_id, NULL AS turn, 1.0 AS advantage FROM read_csv('/etc/passwd')", "disabled by configuration"),
        ("SELECT sample_id, turn FROM turns", "must return column(s) sample_id, turn, advantage"),
    ],
)
def test_a_bad_advantage_policy_is_refused(tmp_path: Path, sql: str, why: str) -> None:
    path = tmp_path / "bad.sql"
    path.write_text(sql)
    with pytest.raises(PolicyError, match=why.replace("(", r"\(").replace(")", r"\)")):
        check_policy(load_policy("advantage", str(path)))


def test_a_policy_that_fails_at_run_time_falls_back_to_episode_credit(catalog: Catalog, tmp_path: Path) -> None:
    path = tmp_path / "nan.sql"
    path.write_text("SELECT sample_id, NULL::INTEGER AS turn, 'inf'::DOUBLE AS advantage FROM candidates")
    samples = _batch(EXTRAS, [1.0, 0.0])
    turns = turns_table(["s0", "s1"], ["g0"] * 2, ["e0", "e1"], [json.dumps(e) for e in EXTRAS])
    answer = catalog.credit.advantages("policy", load_policy("advantage", str(path)), PARAMS, samples, turns)
    assert all(math.isfinite(a) for a in answer.column("advantage").to_pylist())
    assert catalog.policy_failures["advantage:nan"] == 1
