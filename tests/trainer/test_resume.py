"""What a resume restores with checkpoints every K versions: the weights of the newest published version
and, by retraining the batches since the newest checkpoint, the optimizer moments of an uninterrupted run
(the resumed run publishes the very same versions); without those batches, the older moments."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lakeflow.errors import ConfigError
from lakeflow.io import Store, open_store
from lakeflow.lake import layout
from lakeflow.trainer import Trainer, load_config
from lakeflow.weights import load_state, read_manifest
from tests.trainer.helpers import MODEL, tokenizer, write_in_process_config, write_step_batch

STEPS = 4
EVERY = 2  # checkpoints of versions 0 and 2 (4 is the end of the run's)


def trainer(store: Store, tmp_path: Path, cache: str, name: str, publish: str | None = None) -> Trainer:
    path = tmp_path / f"{name}.yaml"
    config = load_config(write_in_process_config(path, cache, checkpoint_every=EVERY, publish_dtype=publish))
    return Trainer(store, MODEL, config, str(tmp_path / name))


def lake(tmp_path: Path, name: str, tiny_dir: str) -> Store:
    store = open_store(str(tmp_path / name))
    tok = tokenizer(tiny_dir)
    for step in range(STEPS):
        write_step_batch(store, step, tok)
    return store


def chain(store: Store) -> list[str]:
    return [read_manifest(store, MODEL, v).state_sha256 for v in range(1, STEPS + 1)]


def checkpoints(store: Store) -> set[int]:
    keys = (layout.parse_checkpoint_key(i.key) for i in store.list(layout.model_checkpoints_prefix(MODEL)))
    return {k[1] for k in keys if k is not None}


@pytest.mark.slow
@pytest.mark.parametrize("publish", [None, "bfloat16"])  # bfloat16: fp32 master weights live in the checkpoints
# untraced: resume is measured in process (tests/trainer/test_loop.py) and in the traced kill -9 test of test_process.py
@pytest.mark.usefixtures("untraced_children")
def test_a_resume_between_checkpoints_publishes_what_an_uninterrupted_run_does(
    tmp_path: Path, tiny_cache: str, tiny_dir: str, caplog: pytest.LogCaptureFixture, publish: str | None
) -> None:
    whole = lake(tmp_path, "whole", tiny_dir)
    t = trainer(whole, tmp_path, tiny_cache, "uninterrupted", publish)
    t.run(until_version=STEPS)
    t.close()
    assert checkpoints(whole) == {0, 2, 4}

    broken = lake(tmp_path, "broken", tiny_dir)
    first = trainer(broken, tmp_path, tiny_cache, "first", publish)
    first.run(until_version=3)  # then dropped without close(), as a crash would leave it
    assert checkpoints(broken) == {0, 2}
    shutil.copytree(tmp_path / "broken", tmp_path / "gone")
    caplog.set_level("INFO", logger="lakeflow.trainer")
    second = trainer(broken, tmp_path, tiny_cache, "second", publish)
    assert second.start() == 3
    assert "retrained batches 2..2 from checkpoint 2" in caplog.text
    assert "identical to published version 3" in caplog.text
    second.run(until_version=STEPS)
    second.close()
    assert chain(broken) == chain(whole)  # version 4 was trained with the moments the uninterrupted run had

    # without batch 2 the moments cannot be rebuilt: version 2's are used, and version 4 differs
    gone = open_store(str(tmp_path / "gone"))
    gone.delete(layout.batch_key(MODEL, 2))
    caplog.clear()
    third = trainer(gone, tmp_path, tiny_cache, "third", publish)
    assert third.start() == 3
    assert "cannot retrain from checkpoint 2" in caplog.text and "1 versions older than the weights" in caplog.text
    third.run(until_version=STEPS)
    third.close()
    assert chain(gone)[:3] == chain(whole)[:3] and chain(gone)[3] != chain(whole)[3]

    if publish is None:
        return
    # a restart at a checkpointed version takes that checkpoint's master weights, not the bf16 ones upcast
    caplog.clear()
    fourth = trainer(broken, tmp_path, tiny_cache, "fourth", publish)
    assert fourth.start() == STEPS
    assert f"restored the float32 master weights of version {STEPS}" in caplog.text
    fourth.close()
    published = read_manifest(broken, MODEL, STEPS)
    assert {t.dtype for t in load_state(str(tmp_path / "fourth" / "policy")).values()} == {"BF16"}
    config = json.loads((tmp_path / "fourth" / "policy" / "config.json").read_text())
    assert config["dtype"] == "bfloat16" and published.version == STEPS
    with pytest.raises(ConfigError, match="publish_dtype: float32 differs from the published versions' bfloat16"):
        trainer(broken, tmp_path, tiny_cache, "fifth", "float32").start()
