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
        # Wait for the timer's thread to end: it holds `con` (through `con.interrupt`), and a thread that
        # drops a connection's last reference while Python exits aborts the process (DuckDB's destructor
        # takes the GIL, the exiting interpreter ends the thread, C++ cannot unwind it: "terminate called
        # without an active exception", seen after `open_lake(url).sql(…)` in a script).
        timer.join()
