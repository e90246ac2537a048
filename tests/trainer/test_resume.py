"""What a resume restores with checkpoints every K versions: the weights of the newest published version
and, by retraining the batches since the newest checkpoint, the optimizer moments of an uninterrupted run
(the resumed run publishes the very same versions); without those batches, the older moments."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakeflow.io import Store, open_store
from lakeflow.lake import layout
from lakeflow.trainer import Trainer, load_config
from lakeflow.weights import read_manifest
from tests.trainer.helpers import MODEL, tokenizer, write_config, write_step_batch

STEPS = 5
EVERY = 3  # checkpoints of versions 0 and 3


def trainer(store: Store, tmp_path: Path, cache: str, name: str) -> Trainer:
    config = load_config(write_config(tmp_path / f"{name}.yaml", cache, checkpoint_every=EVERY))
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
def test_a_resume_between_checkpoints_publishes_what_an_uninterrupted_run_does(
    tmp_path: Path, tiny_cache: str, tiny_dir: str, caplog: pytest.LogCaptureFixture
) -> None:
    whole = lake(tmp_path, "whole", tiny_dir)
    t = trainer(whole, tmp_path, tiny_cache, "uninterrupted")
    t.run(until_version=STEPS)
    t.close()
    assert checkpoints(whole) == {0, 3}

    broken = lake(tmp_path, "broken", tiny_dir)
    first = trainer(broken, tmp_path, tiny_cache, "first")
    first.run(until_version=4)  # then dropped without close(), as a crash would leave it
    assert checkpoints(broken) == {0, 3}
    caplog.set_level("INFO", logger="lakeflow.trainer")
    second = trainer(broken, tmp_path, tiny_cache, "second")
    assert second.start() == 4
    assert (
        "retrained batches 3..3 from checkpoint 3" in caplog.text and "identical to published version 4" in caplog.text
    )
    second.run(until_version=STEPS)
    second.close()
    assert chain(broken) == chain(whole)  # version 5 was trained with the moments the uninterrupted run had

    # without batch 3 the moments cannot be rebuilt: version 3's are used, and version 5 differs
    gone = lake(tmp_path, "gone", tiny_dir)
    third = trainer(gone, tmp_path, tiny_cache, "third")
    third.run(until_version=4)
    gone.delete(layout.batch_key(MODEL, 3))
    caplog.clear()
    fourth = trainer(gone, tmp_path, tiny_cache, "fourth")
    assert fourth.start() == 4
    assert "cannot retrain from checkpoint 3" in caplog.text and "1 versions older than the weights" in caplog.text
    fourth.run(until_version=STEPS)
    fourth.close()
    assert chain(gone)[:4] == chain(whole)[:4] and chain(gone)[4] != chain(whole)[4]
