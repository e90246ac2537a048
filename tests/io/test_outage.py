"""Outages are waited out: an unreachable store is retried with backoff and a status line for the
process's outage budget, then one line. End to end: `lakeflow dataflow` on S3 through a relay that
cuts the store in the middle of its run (it waits and goes on), and one whose budget runs out (exit 1)."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest

from lakeflow.errors import StoreOutageError, StorePermissionError, StoreUnreachableError
from lakeflow.io import S3Options, open_store
from lakeflow.io.memory import MemoryStore
from lakeflow.io.patient import PatientStore
from lakeflow.lake import layout
from tests.dataflow.helpers import group, write_groups
from tests.io.relay import CuttableRelay

ROOT = Path(__file__).resolve().parents[2]


class _Flaky:
    """Fails the first `fails` calls of `get` with `error`, then answers."""

    def __init__(self, fails: int, error: Exception) -> None:
        self.inner = MemoryStore("memory://flaky")
        self.inner.put("k", b"v")
        self.url, self.fails, self.error, self.calls = self.inner.url, fails, error, 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def get(self, key: str) -> bytes:
        self.calls += 1
        if self.calls <= self.fails:
            raise self.error
        return self.inner.get(key)


def test_an_outage_within_the_budget_is_waited_out_with_a_status_line(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    waits: list[float] = []

    def sleep(s: float) -> None:
        waits.append(s)
        now[0] += s

    flaky = _Flaky(4, StoreUnreachableError("cannot reach the endpoint"))
    store = PatientStore(flaky, outage_s=60, clock=lambda: now[0], sleep=sleep)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="lakeflow.io"):
        assert store.get("k") == b"v"
    assert waits == [1.0, 2.0, 4.0, 8.0]  # backoff
    assert "the lake is unreachable" in caplog.text and "answers again" in caplog.text


def test_an_outage_past_the_budget_is_one_error_and_other_errors_are_not_waited_for() -> None:
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    flaky = _Flaky(100, StoreUnreachableError("cannot reach the endpoint"))
    store = PatientStore(flaky, outage_s=10, clock=lambda: now[0], sleep=sleep)  # type: ignore[arg-type]
    with pytest.raises(StoreOutageError, match=r"unreachable for 1\d s, longer than the outage budget of 10 s"):
        store.get("k")
    denied = _Flaky(1, StorePermissionError("access denied for s3:GetObject"))
    with pytest.raises(StorePermissionError):
        PatientStore(denied, outage_s=10, clock=lambda: now[0], sleep=sleep).get("k")  # type: ignore[arg-type]
    assert denied.calls == 1


@pytest.fixture
def relayed(s3_endpoint: str, s3_url: str) -> Iterator[tuple[str, CuttableRelay]]:
    up = urlparse(s3_endpoint)
    relay = CuttableRelay((up.hostname or "127.0.0.1", up.port or 80))
    try:
        yield s3_url, relay
    finally:
        relay.cut()


def _dataflow(lake: str, relay: CuttableRelay, outage_s: float, log: Path) -> subprocess.Popen[bytes]:
    args = ["dataflow", "--lake", lake, "--endpoint-url", relay.url, "--outage-s", str(outage_s)]
    args += ["--config", str(ROOT / "jobs/examples/dataflow-tiny.yaml")]
    with open(log, "wb") as err:
        return subprocess.Popen([sys.executable, "-m", "lakeflow", *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=err)


def _wait_for(what: str, log: Path, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120  # guards a hung test only
    while what not in log.read_text(errors="replace"):
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"never saw {what!r}:\n{log.read_text()}"
        time.sleep(0.1)


@pytest.mark.s3
@pytest.mark.slow
def test_the_dataflow_process_waits_out_a_cut_store_and_goes_on(
    relayed: tuple[str, CuttableRelay], s3_endpoint: str, tmp_path: Path
) -> None:
    lake, relay = relayed
    direct = open_store(lake, S3Options(endpoint_url=s3_endpoint))
    log = tmp_path / "dataflow.log"
    proc = _dataflow(lake, relay, 300, log)
    try:
        _wait_for("serving", log, proc)
        relay.cut()
        _wait_for("the lake is unreachable", log, proc)  # the status line, while it waits
        write_groups(direct, [group("stranger", [1, 0, 1, 0])])  # committed during the outage
        relay.restore()
        _wait_for("the lake answers again", log, proc)
        deadline = time.monotonic() + 120
        while not list(direct.list(layout.QUARANTINE)):  # ingested (and refused: not a model of the run) after it
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, log.read_text()
    assert json.loads(out.decode().strip().splitlines()[-1])["commits"] >= 1


@pytest.mark.s3
@pytest.mark.slow
def test_an_outage_past_the_budget_ends_the_process_with_one_line(
    relayed: tuple[str, CuttableRelay], tmp_path: Path
) -> None:
    lake, relay = relayed
    log = tmp_path / "dataflow.log"
    proc = _dataflow(lake, relay, 2, log)
    try:
        _wait_for("serving", log, proc)
        relay.cut()  # and never restored
        proc.communicate(timeout=180)
        assert proc.returncode == 1, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    assert "Traceback" not in log.read_text()
    assert "unreachable for" in lines[-1] and "longer than the outage budget of 2 s" in lines[-1], lines[-3:]
