"""The batch record: what training step N of one model trains on, as sample references.

The dataflow process writes `batches/<model>/<step>.parquet` with a create-only write
before any trainer reads it, so the set of batch objects is the exact record of what was
consumed: after a crash of any process, the catalog rebuilt from the bucket knows it.
When an advantage policy ran, each row also carries the advantages the trainer weights its tokens
by (CREDIT_SCHEMA), so what was trained on and with which credit are both in the lake.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lakeflow.errors import LakeflowError
from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.lake.reader import SampleRef

BATCH_SCHEMA = pa.schema(
    [
        pa.field("sample_id", pa.string(), nullable=False),
        pa.field("shard", pa.string(), nullable=False),  # committed shard key
        pa.field("row", pa.int32(), nullable=False),  # row in the shard
        pa.field("group_id", pa.string(), nullable=False),
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),  # 'fresh' or 'replay'
        pa.field("policy_version", pa.int64(), nullable=False),
        pa.field("reward", pa.float64(), nullable=False),
        pa.field("group_mean", pa.float64(), nullable=False),  # group statistics at ingest
        pa.field("group_std", pa.float64(), nullable=False),  # unbiased; 1.0 for a singleton group
        pa.field("group_size", pa.int32(), nullable=False),
    ]
)
# Written only when the model has an advantage policy; a batch without them (every batch before them) is
# trained with advantages from the group statistics above, as the trainer's `advantages` config says.
CREDIT_SCHEMA = pa.schema(
    [
        # per turn of the row, in turn order; one value: the whole row. NULL: no credit from the policy
        pa.field("turn_advantages", pa.list_(pa.float64())),
        # response-token offset after each turn's sampled tokens (turn i spans [ends[i-1], ends[i]), the
        # last one reaching the row's end); NULL: one value over the whole response
        pa.field("turn_ends", pa.list_(pa.int32())),
    ]
)
_META = b"lakeflow.batch"


def write_batch(store: Store, model_id: str, step: int, table: pa.Table, meta: dict[str, Any]) -> str:
    """Store batch `step` create-only; FileExistsError if that step already has a batch. The CREDIT_SCHEMA
    columns are stored when `table` has them."""
    schema = BATCH_SCHEMA
    if "turn_advantages" in table.column_names:
        schema = pa.schema([*BATCH_SCHEMA, *CREDIT_SCHEMA])
    table = table.select(schema.names).cast(schema)
    info = {"model_id": model_id, "step": step, "created_at": datetime.now(UTC).isoformat(), **meta}
    table = table.replace_schema_metadata({_META: json.dumps(info).encode()})
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    key = layout.batch_key(model_id, step)
    store.put_if_absent(key, buffer.getvalue())
    return key


def read_batch(store: Store, model_id: str, step: int) -> tuple[pa.Table, dict[str, Any]]:
    """Batch `step` and its metadata; FileNotFoundError while it does not exist yet."""
    key = layout.batch_key(model_id, step)
    data = store.get(key)
    try:
        table = pq.read_table(io.BytesIO(data))
        meta = json.loads((table.schema.metadata or {}).get(_META, b"{}"))
    except (pa.ArrowInvalid, ValueError) as e:
        raise LakeflowError(f"batch object {key} is corrupt: {e}") from e
    return table.replace_schema_metadata(None), meta


def list_batch_steps(store: Store, model_id: str, after: int | None = None) -> list[int]:
    """Steps that have a batch object, ascending (only those after `after` when given)."""
    prefix = layout.batches_prefix(model_id)
    start = layout.batch_key(model_id, after) if after is not None else None
    steps = []
    for info in store.list(prefix, start_after=start):
        name = info.key[len(prefix) :].removesuffix(".parquet")
        if name.isdigit():
            steps.append(int(name))
    return steps


def sample_refs(batch: pa.Table) -> list[SampleRef]:
    """The samples a batch object's rows reference (shard, row, sample_id), in its order."""
    return [
        SampleRef(shard, row, sid)
        for shard, row, sid in zip(
            batch.column("shard").to_pylist(),
            batch.column("row").to_pylist(),
            batch.column("sample_id").to_pylist(),
            strict=True,
        )
    ]
