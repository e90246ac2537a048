"""Time limits for DuckDB statements: a timer interrupts the connection when a statement runs too long."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import duckdb


@contextlib.contextmanager
def interrupt_after(con: duckdb.DuckDBPyConnection, seconds: float | None) -> Iterator[None]:
    """Interrupt whatever `con` runs once `seconds` have passed (None: no limit). The statement then
    raises `duckdb.InterruptException`, and the connection stays usable."""
    if seconds is None:
        yield
        return
    timer = threading.Timer(seconds, con.interrupt)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
