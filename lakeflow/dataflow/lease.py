"""The serving lease: at most one dataflow process serves a lake at a time (`lake/lease.py`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
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


@contextmanager
def held_serving_lease(store: Store, ttl: timedelta, owner: str) -> Iterator[Lease]:
    """The serving lease held for the length of the block, by a one-shot command that must not run
    beside a dataflow process (LeaseHeldError while one serves); released when the block ends."""
    lease = serving_lease(store, ttl, owner)
    lease.acquire()
    try:
        yield lease
    finally:
        lease.release()


__all__ = ["Lease", "held_serving_lease", "serving_lease"]
