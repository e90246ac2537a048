"""The trainer under torchrun: two CPU processes (gloo) with FSDP2 train the same batches to the same
weights as one process (up to float summation order), rank 0 alone publishes, and a restart under
torchrun resumes from the published version with the optimizer state it checkpointed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lakeflow.io import open_store
from lakeflow.lake import layout
from lakeflow.trainer import Trainer, load_config
from lakeflow.weights import list_versions, load_state, pull
from tests.trainer.helpers import MODEL, tokenizer, write_config, write_step_batch


def torchrun(lake: str, config: Path, steps: int, log: Path) -> int:
    args = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    args += ["-m", "lakeflow", "train", "--lake", lake, "--model", MODEL, "--config", str(config)]
    args += ["--steps", str(steps)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(log, "wb") as out:
        return subprocess.run(args, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=300).returncode


def weights(lake: str, version: int, dest: Path) -> dict[str, np.ndarray]:
    pull(open_store(lake), MODEL, str(dest), version)
    return {name: t.bits.view(np.float32) for name, t in load_state(str(dest)).items()}


# untraced: the step, losses and resume are measured in process (tests/trainer/test_loop.py, test_resume.py)
@pytest.mark.usefixtures("untraced_children")
def test_two_ranks_train_like_one_process_and_resume(tmp_path: Path, tiny_cache: str, tiny_dir: str) -> None:
    tok = tokenizer(tiny_dir)
    config = write_config(tmp_path / "trainer.yaml", tiny_cache, minibatches=2, max_tokens_per_microbatch=64)
    single, multi = str(tmp_path / "single"), str(tmp_path / "multi")
    for lake in (single, multi):
        for step in (0, 1):
            write_step_batch(open_store(lake), step, tok)
    Trainer(open_store(single), MODEL, load_config(config), str(tmp_path / "work")).run(until_version=2)

    log = tmp_path / "torchrun.log"
    assert torchrun(multi, config, 2, log) == 0, log.read_text()[-4000:]
    store = open_store(multi)
    assert list_versions(store, MODEL) == [0, 1, 2]
    one, two = weights(single, 2, tmp_path / "a"), weights(multi, 2, tmp_path / "b")
    assert one.keys() == two.keys()
    moved = max(float(np.abs(two[n] - weights(multi, 0, tmp_path / "c")[n]).max()) for n in two)
    diff = max(float(np.abs(one[n] - two[n]).max()) for n in one)
    assert moved > 1e-3 and diff < 5e-3 * moved, (moved, diff)  # same training, not bit for bit (~3e-4 here)
    for step in (0, 1):
        a = json.loads(open_store(single).get(layout.trainer_stats_key(MODEL, step)))
        b = json.loads(store.get(layout.trainer_stats_key(MODEL, step)))
        assert b["samples"] == a["samples"] and abs(a["loss"] - b["loss"]) < 1e-4 * max(1.0, abs(a["loss"]))

    write_step_batch(store, 2, tok)
    assert torchrun(multi, config, 3, log) == 0, log.read_text()[-4000:]
    text = log.read_text()
    assert "resuming policy from published version 2" in text and "loaded optimizer state of version 2" in text
    assert list_versions(store, MODEL) == [0, 1, 2, 3]
