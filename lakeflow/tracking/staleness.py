"""The staleness of the batch a trainer step trained, for the trackers: `step - policy_version` over the
batch's rows (mean and max), read from the batch object (`batches/<model>/<step>.parquet`), which names
each row's policy version. One small read per step; a batch that cannot be read adds nothing.
"""

from __future__ import annotations

import logging

import pyarrow as pa
import pyarrow.compute as pc

from lakeflow.errors import LakeflowError
from lakeflow.io import Store
from lakeflow.lake.batch import read_batch

log = logging.getLogger("lakeflow.tracking")


def batch_staleness(store: Store, model_id: str, step: int) -> dict[str, float]:
    """`staleness_mean`, `staleness_max` and `fresh_share` (share of fresh rows) of batch `step`; {} when
    the batch cannot be read (deleted by retention, not a batch)."""
    try:
        table, _ = read_batch(store, model_id, step)
    except (FileNotFoundError, LakeflowError, pa.ArrowInvalid, OSError, ValueError) as e:
        log.debug("no staleness for %s step %d: %s", model_id, step, e)
        return {}
    if table.num_rows == 0:
        return {}
    staleness = pc.subtract(pa.scalar(step, pa.int64()), table.column("policy_version"))
    fresh = pc.sum(pc.equal(table.column("kind"), "fresh")).as_py() or 0
    return {
        "staleness_mean": float(pc.mean(staleness).as_py()),
        "staleness_max": float(pc.max(staleness).as_py()),
        "fresh_share": fresh / table.num_rows,
    }
