"""The trainer as a real process (`lakeflow train` via its click entry): kill -9 after version 1 and
restart continues without repeating or skipping a batch; SIGTERM while waiting exits 0."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lakeflow.io import Store, open_store
from lakeflow.lake import layout
from lakeflow.trainer import Trainer, load_config
from lakeflow.weights import list_versions, read_latest, read_manifest
from tests.lake.helpers import lapse_lease
from tests.trainer.helpers import MODEL, tokenizer, write_config, write_step_batch

ROOT = Path(__file__).resolve().parents[2]
ENTRY = "from lakeflow.cli.train import train; train()"


def start(lake: str, config: Path, log: Path, steps: int | None, work: Path) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-c", ENTRY, "--lake", lake, "--model", MODEL, "--config", str(config)]
    args += ["--work-dir", str(work)] + (["--steps", str(steps)] if steps is not None else [])
    args += ["--wait"]  # a restart takes over the killed trainer's lease once it has expired (lapse_lease)
    with open(log, "wb") as out:
        return subprocess.Popen(args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)


def wait_for_version(store: Store, proc: subprocess.Popen[bytes], version: int, log: Path) -> int:
    """Poll LATEST until it reaches `version` (the deadline only guards against a hung test)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        latest = read_latest(store, MODEL)
        if latest is not None and latest[0].version >= version:
            return latest[0].version
        if proc.poll() is not None:
            raise AssertionError(f"trainer exited with {proc.returncode}:\n{log.read_text()}")
        time.sleep(0.05)
    raise AssertionError(f"version {version} never appeared:\n{log.read_text()}")


def trained_steps(log: Path) -> list[int]:
    return [int(m) for m in re.findall(r"step (\d+): loss", log.read_text())]


# untraced: the trainer process is measured tracedby
# test_kill_9_between_checkpoints_resumes_to_the_uninterrupted_chain below
@pytest.mark.usefixtures("untraced_children")
def test_kill_9_after_version_1_resumes_without_repeating_or_skipping(
    tmp_path: Path, tiny_cache: str, tiny_dir: str
) -> None:
    lake = str(tmp_path / "lake")
    store = open_store(lake)
    tok = tokenizer(tiny_dir)
    for step in (0, 1):
        write_step_batch(store, step, tok)
    config = write_config(tmp_path / "trainer.yaml", tiny_cache)
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    proc = start(lake, config, first_log, 3, tmp_path / "work1")
    try:
        wait_for_version(store, proc, 1, first_log)
        os.kill(proc.pid, signal.SIGKILL)  # wherever it is: training batch 1, publishing 2, or waiting for batch 2
    finally:
        proc.wait()
    killed_at = read_latest(store, MODEL)[0].version  # type: ignore[index]
    assert killed_at in (1, 2)
    lapse_lease(store, layout.trainer_lease_key(MODEL))  # the killed trainer's lease, waited out
    write_step_batch(store, 2, tok)
    proc = start(lake, config, second_log, 3, tmp_path / "work2")
    assert proc.wait(timeout=300) == 0, second_log.read_text()
    text = second_log.read_text()
    assert f"resuming {MODEL} from published version {killed_at}" in text
    assert "loaded optimizer state of version" in text
    assert trained_steps(second_log) == list(range(killed_at, 3))  # starts where the lake says, no repeat
    # training runs at most one step ahead of publishing: the killed process may have trained one more
    assert set(trained_steps(first_log)) <= set(range(killed_at + 1))
    assert list_versions(store, MODEL) == [0, 1, 2, 3]
    for version in (1, 2, 3):
        assert read_manifest(store, MODEL, version).base_version in (version - 1, None)
    for step in (0, 1, 2):
        stats = json.loads(store.get(layout.trainer_stats_key(MODEL, step)))
        assert stats["batch"] == stats["trained_from"] == step and stats["version"] == step + 1
        assert set(stats) >= {"step", "wait_s", "step_s", "loss", "reward_mean", "tokens", "at"}


def test_sigterm_while_waiting_exits_cleanly(tmp_path: Path, tiny_cache: str) -> None:
    lake = str(tmp_path / "lake")
    store = open_store(lake)
    config = write_config(tmp_path / "trainer.yaml", tiny_cache)
    log = tmp_path / "trainer.log"
    proc = start(lake, config, log, None, tmp_path / "work")
    try:
        wait_for_version(store, proc, 0, log)  # version 0 published; now waiting for batch 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "stopped before finishing step 0" in log.read_text()
    assert list_versions(store, MODEL) == [0]


@pytest.mark.slow
def test_kill_9_between_checkpoints_resumes_to_the_uninterrupted_chain(
    tmp_path: Path, tiny_cache: str, tiny_dir: str
) -> None:
    """Checkpoints every 3 versions: kill -9 once version 4 is published (moments of no checkpoint); the
    restarted process retrains batch 3 from checkpoint 3 and publishes what an uninterrupted run does."""
    tok = tokenizer(tiny_dir)
    whole, lake = str(tmp_path / "whole"), str(tmp_path / "lake")
    for step in range(5):
        write_step_batch(open_store(whole), step, tok)
    for step in range(4):  # batch 4 comes after the kill
        write_step_batch(open_store(lake), step, tok)
    config = write_config(tmp_path / "trainer.yaml", tiny_cache, checkpoint_every=3)
    uninterrupted = Trainer(open_store(whole), MODEL, load_config(config), str(tmp_path / "work0"))
    uninterrupted.run(until_version=5)
    uninterrupted.close()
    store = open_store(lake)
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    proc = start(lake, config, first_log, 5, tmp_path / "work1")
    try:
        wait_for_version(store, proc, 4, first_log)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    lapse_lease(store, layout.trainer_lease_key(MODEL))  # the killed trainer's lease, waited out
    write_step_batch(store, 4, tok)
    proc = start(lake, config, second_log, 5, tmp_path / "work2")
    assert proc.wait(timeout=300) == 0, second_log.read_text()
    text = second_log.read_text()
    assert "resuming policy from published version 4" in text
    assert "retrained batches 3..3 from checkpoint 3" in text and "identical to published version 4" in text
    chain = [read_manifest(store, MODEL, v).state_sha256 for v in range(1, 6)]
    assert chain == [read_manifest(open_store(whole), MODEL, v).state_sha256 for v in range(1, 6)]
