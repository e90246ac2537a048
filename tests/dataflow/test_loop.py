"""The dataflow loop's idle sleep: poll_s after work, doubling while nothing happens, up to max_poll_s."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakeflow.dataflow import service as dataflow_service
from lakeflow.dataflow.service import DataflowService
from lakeflow.io import open_store
from tests.dataflow.helpers import config


def sleeps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, busy: list[bool], **loop: float) -> list[float]:
    """The sleeps of `len(busy)` iterations whose step reports `busy` in turn."""
    service = DataflowService(open_store(str(tmp_path / "lake")), config(loop=loop))
    steps = iter(busy)
    monkeypatch.setattr(service, "step", lambda: next(steps))
    slept: list[float] = []
    monkeypatch.setattr(dataflow_service.time, "sleep", slept.append)
    service.run(iterations=len(busy))
    return slept


def test_an_idle_loop_backs_off_to_max_poll_s_and_work_resets_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    busy = [False, False, False, False, True, False, False]
    assert sleeps(tmp_path, monkeypatch, busy, poll_s=0.1, max_poll_s=0.4) == [0.1, 0.2, 0.4, 0.4, 0.1]


def test_without_max_poll_s_every_idle_sleep_is_poll_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    busy = [False, False, False, True, False, False]
    assert sleeps(tmp_path, monkeypatch, busy, poll_s=0.1) == [0.1, 0.1, 0.1, 0.1]


def test_a_step_that_really_runs_on_an_empty_lake_is_idle(tmp_path: Path) -> None:
    service = DataflowService(open_store(str(tmp_path / "lake")), config(loop={"poll_s": 0.01, "max_poll_s": 0.02}))
    service.start()
    service.step()  # the first step after start() counts as work
    assert service.step() is False  # no shard, no dataset: nothing ingested, served or issued
