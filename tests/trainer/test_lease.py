"""One trainer per model: the trainer lease (`trainer/lease.py`) and two real `lakeflow train`
processes started at once on one model, on a local and an S3 lake: exactly one publishes, the other
exits with one line naming the holder, and every published version verifies."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lakeflow.errors import LeaseHeldError, WeightsConflictError
from lakeflow.io import S3Options, open_store
from lakeflow.lake import layout
from lakeflow.trainer.lease import TrainerLease
from lakeflow.weights import list_versions
from tests.lake.helpers import ManualClock
from tests.trainer.helpers import MODEL, tokenizer, write_config, write_step_batch

ROOT = Path(__file__).resolve().parents[2]


def test_a_second_trainer_is_refused_with_the_holder_and_waits_with_wait(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    first = TrainerLease(store, MODEL, ttl_s=30, owner="first-host")
    first.acquire()
    second = TrainerLease(store, MODEL, ttl_s=30, owner="second-host")
    with pytest.raises(LeaseHeldError, match=r"'policy' is trained by trainer first-host until \d\d:\d\d:\d\d UTC"):
        second.acquire()
    first.check()  # the holder may publish
    took = threading.Event()

    def waiter() -> None:
        second.acquire(wait=True)
        took.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    assert not took.wait(0.3)  # still held: the waiter waits (a check that a wait happens, not of its speed)
    first.release()
    thread.join(timeout=60)
    assert took.is_set()
    second.check()
    with pytest.raises(WeightsConflictError, match="may have lapsed"):
        first.check()  # released: the old holder may not publish
    second.release()


def test_a_holder_whose_lease_was_taken_over_publishes_nothing(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    clock = ManualClock()  # both trainers' clock: time passes only where the test moves it
    holder = TrainerLease(store, MODEL, ttl_s=1.0, owner="slow", clock=clock)
    holder.lease.acquire()  # without the renewing thread: as a holder frozen past its lease
    clock.advance(1.1)  # the lease has expired (only an expiry, not a race, decides what follows)
    successor = TrainerLease(store, MODEL, ttl_s=30, owner="successor", clock=clock)
    successor.acquire()
    with pytest.raises(WeightsConflictError, match="lost the trainer lease of 'policy' to another trainer"):
        holder.check()  # it tries to renew (an outage may have kept it from it): the swap fails
    with pytest.raises(WeightsConflictError, match="lost the trainer lease"):
        holder.check()
    successor.release()


def test_a_holder_that_could_not_renew_during_an_outage_renews_when_it_checks(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    clock = ManualClock()
    holder = TrainerLease(store, MODEL, ttl_s=1.0, owner="patient", clock=clock)
    holder.lease.acquire()  # not renewed meanwhile, as during an outage
    clock.advance(1.1)
    holder.check()  # nobody took it: the compare-and-swap renewal succeeds and it may publish
    assert holder.lease.valid()


def _start(lake: str, config: Path, log: Path, work: Path, steps: int) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "lakeflow", "train", "--lake", lake, "--model", MODEL, "--config", str(config)]
    args += ["--work-dir", str(work), "--steps", str(steps)]
    with open(log, "wb") as out:
        return subprocess.Popen(args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)


def _verify(lake: str, version: int) -> str:
    args = [sys.executable, "-m", "lakeflow", "weights", "verify", "--lake", lake, "--model", MODEL]
    done = subprocess.run([*args, "--version", str(version)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local", pytest.param("s3", marks=pytest.mark.s3)])
# untraced: the lease is measured in process (the other tests of this file)
@pytest.mark.usefixtures("untraced_children")
def test_two_trainers_started_at_once_exactly_one_publishes(
    backend: str, tmp_path: Path, tiny_cache: str, tiny_dir: str, request: pytest.FixtureRequest
) -> None:
    if backend == "s3":
        request.getfixturevalue("s3_env")
        lake = str(request.getfixturevalue("s3_url"))
        store = open_store(lake, S3Options(endpoint_url=request.getfixturevalue("s3_endpoint")))
    else:
        lake = str(tmp_path / "lake")
        store = open_store(lake)
    tok = tokenizer(tiny_dir)
    for step in (0, 1):
        write_step_batch(store, step, tok)
    config = write_config(tmp_path / "trainer.yaml", tiny_cache)
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    # 3 steps but 2 batches: the holder waits for batch 2 with its lease held, whatever the timing
    procs = [_start(lake, config, logs[i], tmp_path / f"work{i}", 3) for i in range(2)]
    try:
        deadline = time.monotonic() + 240  # guards a hung test only
        while all(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.1)
        loser = next(i for i, p in enumerate(procs) if p.poll() is not None)
        winner = 1 - loser
        assert procs[loser].returncode == 1, logs[loser].read_text()
        text = logs[loser].read_text()
        assert f"model '{MODEL}' is trained by trainer " in text and " UTC; only one trainer may publish" in text
        assert "published" not in text and "Traceback" not in text
        write_step_batch(store, 2, tok)
        assert procs[winner].wait(timeout=240) == 0, logs[winner].read_text()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert list_versions(store, MODEL) == [0, 1, 2, 3]
    for version in range(4):
        assert "every checksum matches" in _verify(lake, version)
    released = store.get(layout.trainer_lease_key(MODEL))  # given back at a clean exit
    assert b"expires_at" in released
    assert "holding the trainer lease of policy" in logs[winner].read_text()
