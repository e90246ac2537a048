"""The turns of a batch's samples, from each sample's `extra`: the rows of the `turns` view that
advantage policies read (turn-level credit, catalog/policies/README.md).

An agent episode stored as one sample has `extra.turn_ends` (response-token offset after each turn's
sampled tokens), `extra.turn_rewards` and `extra.turn_obs`; turn i spans [turn_ends[i-1], turn_ends[i]).
With `per_turn_samples` each sample is one turn (`extra.turn`) spanning its whole response. Any other
sample (a single-turn task, a sample written before turn_ends existed, or extras that do not parse) is
one turn over its whole response with no per-turn reward. `extra` is writer input: what does not have
the expected shape falls back to that single turn instead of failing the batch.
"""

from __future__ import annotations

import itertools
import json
import math
from typing import Any, TypeGuard

import pyarrow as pa

TURN_SCHEMA = pa.schema(
    [
        pa.field("sample_id", pa.string(), nullable=False),
        pa.field("group_id", pa.string(), nullable=False),
        pa.field("episode_id", pa.string(), nullable=False),
        # turns with one sequence_id are one sequence, in turn order: the sample's own turns, or with
        # per_turn_samples the episode's samples (then it is the episode id)
        pa.field("sequence_id", pa.string(), nullable=False),
        pa.field("turn", pa.int32(), nullable=False),  # 0, 1, … within the episode
        pa.field("token_start", pa.int32(), nullable=False),  # response-token offset where the turn starts
        pa.field("token_end", pa.int32()),  # offset after its sampled tokens; NULL: to the response's end
        pa.field("reward", pa.float64()),  # the environment's reward for this turn; NULL: none given
        pa.field("final", pa.bool_(), nullable=False),  # the episode's last turn (its reward comes after it)
        pa.field("obs_hash", pa.string()),  # hash of the observation the turn answered; NULL: unknown
    ]
)


def turns_table(sample_ids: list[str], group_ids: list[str], episode_ids: list[str], extras: list[str]) -> pa.Table:
    """One row per turn of each sample (TURN_SCHEMA), in sample order, then turn order."""
    rows: list[dict[str, Any]] = []
    for sample_id, group_id, episode_id, extra in zip(sample_ids, group_ids, episode_ids, extras, strict=True):
        ids = {"sample_id": sample_id, "group_id": group_id, "episode_id": episode_id, "sequence_id": sample_id}
        rows += [ids | turn for turn in sample_turns(extra, episode_id)]
    return pa.Table.from_pylist(rows, schema=TURN_SCHEMA)


def sample_turns(extra: str, episode_id: str) -> list[dict[str, Any]]:
    """The turns of one sample (TURN_SCHEMA less the ids, with `sequence_id` for a per-turn sample),
    from its `extra` JSON."""
    try:
        info = json.loads(extra)
    except (TypeError, ValueError):
        info = None
    if not isinstance(info, dict):
        return [_turn(0, 0, None, None, True, None)]
    rewards, obs = _list(info.get("turn_rewards")), _list(info.get("turn_obs"))
    turn, segments = info.get("segment"), info.get("segments")
    if _count(turn) and _count(segments) and turn < segments:  # per_turn_samples: this sample is one turn
        one = _turn(turn, 0, None, _reward(rewards, turn), turn == segments - 1, _obs(obs, turn))
        return [one | {"sequence_id": episode_id}]
    ends = _list(info.get("turn_ends"))
    if not ends or not all(_count(e) for e in ends) or any(b < a for a, b in itertools.pairwise(ends)):
        return [_turn(0, 0, None, _reward(rewards, 0) if len(rewards) == 1 else None, True, _obs(obs, 0))]
    starts = [0, *ends[:-1]]
    last = len(ends) - 1
    return [_turn(i, starts[i], ends[i], _reward(rewards, i), i == last, _obs(obs, i)) for i in range(len(ends))]


def _turn(turn: int, start: int, end: int | None, reward: float | None, final: bool, obs: str | None) -> dict[str, Any]:
    return {"turn": turn, "token_start": start, "token_end": end, "reward": reward, "final": final, "obs_hash": obs}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _count(value: Any) -> TypeGuard[int]:
    """A non-negative int that fits INTEGER (bool is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31


def _reward(rewards: list[Any], i: int) -> float | None:
    value: Any = rewards[i] if i < len(rewards) else None
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _obs(obs: list[Any], i: int) -> str | None:
    value = obs[i] if i < len(obs) else None
    return value[:64] if isinstance(value, str) else None
