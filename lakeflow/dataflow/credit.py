"""Turn-level credit for one batch: each sample's turns from its shard (`episode_id`, `extra`), the
model's advantage policy over them (`Catalog.credit`), and the answer added to the batch table as its
CREDIT_SCHEMA columns, so the batch object records the advantages the trainer will weight tokens by.

Reading `extra` costs one small column per shard of the batch (no payload). A shard that cannot be
read gives its samples one turn each; the trainer refuses their rows anyway.
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa

from lakeflow.catalog.policy import Policy
from lakeflow.catalog.state import Catalog
from lakeflow.dataflow.config import ModelConfig
from lakeflow.errors import LakeflowError
from lakeflow.lake import LakeReader
from lakeflow.lake.batch import CREDIT_SCHEMA, sample_refs
from lakeflow.lake.turns import turns_table

log = logging.getLogger("lakeflow.dataflow")


def credit_batch(
    reader: LakeReader, catalog: Catalog, model: ModelConfig, step: int, policy: Policy, batch: pa.Table
) -> pa.Table:
    """`batch` (BATCH_SCHEMA rows) with `turn_advantages` and `turn_ends` from the advantage policy."""
    sample_ids = batch.column("sample_id").to_pylist()
    episodes, extras = read_extras(reader, batch)
    turns = turns_table(sample_ids, batch.column("group_id").to_pylist(), episodes, extras)
    samples = batch.append_column("episode_id", pa.array(episodes, pa.string()))
    params: dict[str, Any] = {"model_id": model.id, "step": step, **model.credit.model_dump()}
    answer = catalog.credit.advantages(model.id, policy, params, samples, turns)
    values, ends = credit_columns(sample_ids, turns, answer)
    batch = batch.append_column(CREDIT_SCHEMA.field("turn_advantages"), pa.array(values, pa.list_(pa.float64())))
    return batch.append_column(CREDIT_SCHEMA.field("turn_ends"), pa.array(ends, pa.list_(pa.int32())))


def read_extras(reader: LakeReader, batch: pa.Table) -> tuple[list[str], list[str]]:
    """Per batch row, its episode id and `extra` JSON; a row whose shard cannot be read gets its sample
    id and '{}' (one turn)."""
    refs = sample_refs(batch)
    try:
        part = reader.read_samples(refs, columns=["episode_id", "extra"])
        return part.column("episode_id").to_pylist(), part.column("extra").to_pylist()
    except (LakeflowError, KeyError, pa.ArrowException) as e:  # one shard spoils the batch read: read shard by shard
        log.warning("reading the turns of a batch: %s; reading each shard on its own", e)
    episodes: list[str] = batch.column("sample_id").to_pylist()
    extras = ["{}"] * len(refs)
    by_shard: dict[str, list[int]] = {}
    for i, ref in enumerate(refs):
        by_shard.setdefault(ref.shard, []).append(i)
    for shard, positions in by_shard.items():
        try:
            part = reader.read_samples([refs[i] for i in positions], columns=["episode_id", "extra"])
            found = zip(part.column("episode_id").to_pylist(), part.column("extra").to_pylist(), strict=True)
        except (LakeflowError, KeyError, pa.ArrowException) as e:
            log.warning("shard %s: its samples get one turn each: %s", shard, e)
            continue
        for i, (episode, extra) in zip(positions, found, strict=True):
            episodes[i], extras[i] = episode, extra
    return episodes, extras


def credit_columns(
    sample_ids: list[str], turns: pa.Table, answer: pa.Table
) -> tuple[list[list[float] | None], list[list[int] | None]]:
    """Per sample, its advantages in turn order and its turn ends (None: the whole response). A sample
    the policy did not answer gets None (the trainer then credits it from the group statistics); a turn
    it did not answer gets 0.0."""
    spans: dict[str, list[tuple[int, int | None]]] = {}
    for sid, turn, end in zip(*(turns.column(c).to_pylist() for c in ("sample_id", "turn", "token_end")), strict=True):
        spans.setdefault(sid, []).append((turn, end))
    credit: dict[str, dict[int | None, float]] = {}
    for sid, turn, adv in zip(*(answer.column(c).to_pylist() for c in ("sample_id", "turn", "advantage")), strict=True):
        credit.setdefault(sid, {})[turn] = adv
    values: list[list[float] | None] = []
    ends: list[list[int] | None] = []
    for sid in sample_ids:
        got, own = credit.get(sid), spans.get(sid, [])
        if got is None:
            values.append(None)
            ends.append(None)
        elif None in got or len(own) < 2:  # one value for the whole response
            values.append([got[None] if None in got else next(iter(got.values()))])
            ends.append(None)
        else:
            values.append([got.get(turn, 0.0) for turn, _ in own])
            known = [e for _, e in own if e is not None]
            ends.append(known if len(known) == len(own) else None)
    return values, ends
