"""The statement time limit: it interrupts a long statement and leaves no thread behind."""

from __future__ import annotations

import threading

import duckdb
import pytest

from lakeflow.catalog.limits import interrupt_after


def _timers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if isinstance(t, threading.Timer)]


def test_the_limit_leaves_no_timer_thread_holding_the_connection() -> None:
    """A timer thread still alive after the statement holds the connection; if it drops the connection's
    last reference while Python exits, the process aborts. So the limit's thread has ended on return."""
    con = duckdb.connect()
    before = _timers()
    with interrupt_after(con, 60):
        assert con.sql("SELECT 42").fetchall() == [(42,)]
    assert _timers() == before
    con.close()


def test_the_limit_interrupts_a_statement_that_runs_past_it() -> None:
    con = duckdb.connect()
    with pytest.raises(duckdb.InterruptException), interrupt_after(con, 0.2):
        con.sql("SELECT count(*) FROM range(10000000000) a").fetchall()  # minutes of work: only the limit ends it
    assert con.sql("SELECT 1").fetchall() == [(1,)]  # the connection stays usable
    assert _timers() == []
    con.close()
