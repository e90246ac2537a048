"""The quarantine record: rejected input (a commit, a shard, some rows) with the reason, written by the
dataflow process under `_quarantine/` and read by `lakeflow sql` and the report. Defined once, here."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lakeflow.io import Store
from lakeflow.lake import layout

MAX_IDS = 10_000  # sample ids kept per record; a record of more rows names only the first ones
GROUP_SOURCE = "group:"  # source prefix of a rejected group (`group:<model>/<group id>`), which may span shards


class QuarantineRecord(BaseModel):
    """One rejection."""

    model_config = ConfigDict(extra="ignore")

    source: str = Field(description="What was rejected: a shard key, a commit key, or 'catalog'.")
    rows: int = Field(ge=0, description="Rows rejected (0 for a commit record).")
    reason: str = Field(description="Why, in one line.")
    at: datetime = Field(description="When the dataflow process rejected it (UTC).")
    sample_ids: list[str] = Field(default_factory=list, description="Ids of the rejected rows (at most MAX_IDS).")
    positions: list[int] = Field(
        default_factory=list, description="Rows of a rejected shard's rows, by position in the shard (at most MAX_IDS)."
    )

    @property
    def whole(self) -> bool:
        """True when the whole source was rejected (nothing named: a commit or an entire shard)."""
        return not self.sample_ids and not self.positions

    @property
    def complete(self) -> bool:
        """True when every rejected row is named by its position (rows of a shard) or its id (a group)."""
        return len(self.positions) >= self.rows or (not self.positions and len(self.sample_ids) >= self.rows)


def write_quarantine(
    store: Store, source: str, rows: int, reason: str, at: datetime, ids: list[Any], positions: list[int] | None = None
) -> str:
    """Write one record under a key unique to (source, reason, time); returns the key."""
    record = QuarantineRecord(
        source=source,
        rows=rows,
        reason=reason,
        at=at,
        sample_ids=[str(i) for i in ids[:MAX_IDS] if i is not None],
        positions=(positions or [])[:MAX_IDS],
    )
    digest = hashlib.sha256(f"{source}\n{reason}".encode()).hexdigest()[:12]
    key = layout.quarantine_key(at, f"{source}-{digest}-{at:%H%M%S%f}")
    store.put(key, record.model_dump_json().encode())
    return key


def read_quarantine(store: Store, threads: int = 16) -> tuple[list[QuarantineRecord], list[tuple[str, str]]]:
    """Every quarantine record, and the keys that could not be read as one (with why)."""
    keys = [info.key for info in store.list(layout.QUARANTINE)]

    def read(key: str) -> QuarantineRecord | str | None:
        try:
            return QuarantineRecord.model_validate_json(store.get(key))
        except FileNotFoundError:
            return None  # expired by retention while we listed
        except (ValidationError, ValueError) as e:
            return f"not a quarantine record: {str(e).splitlines()[0]}"

    records, bad = [], []
    with ThreadPoolExecutor(max(1, min(threads, len(keys)))) as pool:
        for key, outcome in zip(keys, pool.map(read, keys), strict=True):
            if isinstance(outcome, QuarantineRecord):
                records.append(outcome)
            elif outcome is not None:
                bad.append((key, outcome))
    return records, bad


@dataclass
class Exclusions:
    """What quarantine records take out of a set of committed shards (the dataflow's rejections, as
    `lakeflow sql` and the compacted table apply them): whole shards with why; rows of a shard by
    position (not by id: a hostile row may copy an honest sample's id); the ids of rejected groups,
    wherever they sit. Records about the catalog (duplicates and late samples of ids it already
    holds) remove nothing."""

    shards: dict[str, str] = field(default_factory=dict)
    rows: set[tuple[str, int]] = field(default_factory=set)
    ids: set[str] = field(default_factory=set)


def exclusions(records: list[QuarantineRecord], shards: Iterable[str] | None = None) -> Exclusions:
    """The exclusions `records` make; with `shards`, only those about these shards (and every group)."""
    out = Exclusions()
    known = set(shards) if shards is not None else None
    for record in records:
        if record.source.startswith(GROUP_SOURCE):
            if record.complete:
                out.ids.update(record.sample_ids)
        elif known is not None and record.source not in known:
            continue
        elif not layout.is_shard_key(record.source):
            continue  # a commit key or 'catalog': nothing of a shard to leave out
        elif record.positions and record.complete:
            out.rows.update((record.source, position) for position in record.positions)
        else:
            why = record.reason if record.whole else f"{record.rows} rows quarantined ({record.reason}), not all named"
            out.shards[record.source] = f"quarantined by the dataflow: {why}"
    return out
