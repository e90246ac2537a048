"""The serving lease: at most one dataflow process serves a lake at a time (`lake/lease.py`)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.lake.lease import Lease, LeaseWords, utc_clock

SERVING = LeaseWords(
    held="lake is served by dataflow process {owner} until {until:%H:%M:%S} UTC; "
    "stop it, or pass --wait to take over when its lease expires",
    race="another dataflow process took the lease at the same moment",
    lost="lost the serving lease to another dataflow process; stopping",
)


def serving_lease(
    store: Store, ttl: timedelta, owner: str | None = None, clock: Callable[[], datetime] = utc_clock
) -> Lease:
    """The lake's serving lease (`_dataflow/lease.json`)."""
    return Lease(store, layout.DATAFLOW_LEASE, ttl, SERVING, owner, clock)


__all__ = ["Lease", "serving_lease"]
