"""The trainer in-process on a local lake: versions 0..N published from batches 0..N-1, weights change,
heartbeats written, the published state is the trainer's state bit for bit, and crashes resume."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from lakeflow.cli.weights import weights as weights_cli
from lakeflow.io import Store, open_store
from lakeflow.lake import layout
from lakeflow.lake.metrics import read_metrics
from lakeflow.trainer import Trainer, load_config
from lakeflow.trainer.model import to_state
from lakeflow.weights import list_versions, load_state, read_latest, read_manifest, state_sha256
from tests.trainer.helpers import MODEL, tokenizer, write_in_process_config, write_step_batch


def trainer(store: Store, tmp_path: Path, cache: str, name: str = "work", **overrides: object) -> Trainer:
    config = load_config(write_in_process_config(tmp_path / f"{name}.yaml", cache, **overrides))
    return Trainer(store, MODEL, config, str(tmp_path / name))


def test_two_steps_publish_versions_and_match_a_pull_bit_for_bit(
    tmp_path: Path, tiny_cache: str, tiny_dir: str
) -> None:
    lake = str(tmp_path / "lake")
    store = open_store(lake)
    tok = tokenizer(tiny_dir)
    for step in (0, 1):
        write_step_batch(store, step, tok)
    t = trainer(store, tmp_path, tiny_cache)
    assert t.start() == 0
    v0 = to_state(t.model)
    t.run(until_version=2)
    assert [v for v in list_versions(store, MODEL)] == [0, 1, 2]
    latest = read_latest(store, MODEL)
    assert latest is not None and latest[0].version == 2 == t.version
    assert read_manifest(store, MODEL, 0).kind == "full" and read_manifest(store, MODEL, 2).kind == "delta"
    changed = [n for n in v0 if not np.array_equal(v0[n].bits, t.base[n].bits)]
    assert changed, "training changed no weight"
    for step in (0, 1):
        stats = json.loads(store.get(layout.trainer_stats_key(MODEL, step)))
        assert stats["step"] == stats["batch"] == stats["trained_from"] == step and stats["version"] == step + 1
        assert stats["samples"] == 8 and stats["tokens"] > 0 and np.isfinite(stats["loss"])
        assert stats["wait_s"] >= 0 and stats["step_s"] > 0 and stats["at"].endswith("+00:00")
        assert store.get(layout.checkpoint_object_key(MODEL, step + 1, "optimizer.pt"))
    # `lakeflow weights pull` of version 2 is the trainer's in-memory state, bit for bit
    dest = tmp_path / "pulled"
    result = CliRunner().invoke(weights_cli, ["pull", "--lake", lake, "--model", MODEL, "--dest", str(dest)])
    assert result.exit_code == 0, result.output
    pulled = load_state(str(dest))
    mine = to_state(t.model)
    assert pulled.keys() == mine.keys()
    for name in mine:
        assert pulled[name].dtype == mine[name].dtype and np.array_equal(pulled[name].bits, mine[name].bits), name
    assert state_sha256(pulled) == read_manifest(store, MODEL, 2).state_sha256


def test_resume_loads_weights_and_optimizer_and_continues(tmp_path: Path, tiny_cache: str, tiny_dir: str) -> None:
    store = open_store(str(tmp_path / "lake"))
    tok = tokenizer(tiny_dir)
    for step in (0, 1):
        write_step_batch(store, step, tok)
    first = trainer(store, tmp_path, tiny_cache, "first")
    first.run(until_version=1)
    second = trainer(store, tmp_path, tiny_cache, "second")
    assert second.start() == 1
    assert state_sha256(second.base) == state_sha256(first.base)
    a, b = first.optimizer, second.optimizer
    assert a is not None and b is not None
    for pa_, pb in zip(a.param_groups[0]["params"], b.param_groups[0]["params"], strict=True):
        assert np.array_equal(a.state[pa_]["exp_avg_sq"].numpy(), b.state[pb]["exp_avg_sq"].numpy())
    second.run(until_version=2)
    assert list_versions(store, MODEL) == [0, 1, 2]


def test_crash_after_the_manifest_before_latest_resumes_from_the_complete_version(
    tmp_path: Path, tiny_cache: str, tiny_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kill -9 between writing version 2's manifest (the last of its objects) and moving LATEST: version
    2 is complete, so the restart resumes from it, points LATEST at it and trains batch 2 next;
    nothing is skipped, repeated or overwritten."""
    publish_module = importlib.import_module("lakeflow.weights.publish")  # the package re-exports `publish`

    store = open_store(str(tmp_path / "lake"))
    tok = tokenizer(tiny_dir)
    for step in (0, 1, 2):
        write_step_batch(store, step, tok)
    first = trainer(store, tmp_path, tiny_cache, "first", writer="thread")  # the patch below reaches a thread
    first.run(until_version=1)
    real_move = publish_module._move_latest

    def crash(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt("simulated crash before LATEST moves")

    monkeypatch.setattr(publish_module, "_move_latest", crash)
    with pytest.raises(KeyboardInterrupt):
        first.run(until_version=2)
    assert read_latest(store, MODEL)[0].version == 1  # type: ignore[index]
    manifest = store.get(layout.weights_manifest_key(MODEL, 2))  # written: only the pointer is behind
    monkeypatch.setattr(publish_module, "_move_latest", real_move)
    second = trainer(store, tmp_path, tiny_cache, "second")
    assert second.start() == 2
    assert read_latest(store, MODEL)[0].version == 2  # type: ignore[index]
    second.run(until_version=3)
    assert store.get(layout.weights_manifest_key(MODEL, 2)) == manifest
    assert list_versions(store, MODEL) == [0, 1, 2, 3]
    for step in (0, 1, 2):
        stats = json.loads(store.get(layout.trainer_stats_key(MODEL, step)))
        assert stats["batch"] == stats["trained_from"] == step
    assert state_sha256(second.base) == read_manifest(store, MODEL, 3).state_sha256


def test_deleted_latest_resumes_from_the_newest_manifest(tmp_path: Path, tiny_cache: str, tiny_dir: str) -> None:
    """A writer deleted LATEST: the restarted trainer resumes from the newest published version, repairs
    the pointer and never republishes version 0 or retrains batch 0."""
    store = open_store(str(tmp_path / "lake"))
    tok = tokenizer(tiny_dir)
    for step in (0, 1, 2):
        write_step_batch(store, step, tok)
    trainer(store, tmp_path, tiny_cache, "first").run(until_version=2)
    base = store.get(layout.weights_manifest_key(MODEL, 0))
    store.delete(layout.latest_weights_key(MODEL))
    second = trainer(store, tmp_path, tiny_cache, "second")
    assert second.start() == 2
    assert read_latest(store, MODEL) is not None and read_latest(store, MODEL)[0].version == 2  # type: ignore[index]
    second.run(until_version=3)
    assert list_versions(store, MODEL) == [0, 1, 2, 3]
    assert store.get(layout.weights_manifest_key(MODEL, 0)) == base


def test_missing_optimizer_checkpoint_still_resumes_from_latest(
    tmp_path: Path, tiny_cache: str, tiny_dir: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(str(tmp_path / "lake"))
    tok = tokenizer(tiny_dir)
    write_step_batch(store, 0, tok)
    trainer(store, tmp_path, tiny_cache, "first").run(until_version=1)
    for version in (0, 1):  # version 0's checkpoint (fresh moments) would be retrained from
        store.delete(layout.checkpoint_object_key(MODEL, version, "optimizer.pt"))
    caplog.set_level("INFO", logger="lakeflow.trainer")
    second = trainer(store, tmp_path, tiny_cache, "second")
    assert second.start() == 1
    assert "no optimizer checkpoint for version 1" in caplog.text
    assert second.optimizer is not None and not second.optimizer.state


def test_kl_and_sft_objectives_train(tmp_path: Path, tiny_cache: str, tiny_dir: str) -> None:
    store = open_store(str(tmp_path / "lake"))
    tok = tokenizer(tiny_dir)
    for step in (0, 1):
        write_step_batch(store, step, tok)
    t = trainer(store, tmp_path, tiny_cache, loss={"type": "m2po", "m2_threshold": 0.04}, kl={"coef": 0.1})
    t.run(until_version=1)
    stats = json.loads(store.get(layout.trainer_stats_key(MODEL, 0)))
    assert "kl_mean" in stats and "m2_mean" in stats
    sft = trainer(store, tmp_path, tiny_cache, "sft", loss={"type": "sft"})
    sft.run(until_version=2)
    assert json.loads(store.get(layout.trainer_stats_key(MODEL, 1)))["loss"] > 0  # an NLL is positive


def test_a_corrected_loss_trains_and_its_weights_reach_trainer_steps(
    tmp_path: Path, tiny_cache: str, tiny_dir: str
) -> None:
    """tis with two minibatches (the proximal forward before the first update) in the real loop; the
    engine logprobs of the helper's samples (-4 to -7 nats) are far below the model's, so weights truncate."""
    store = open_store(str(tmp_path / "lake"))
    tok = tokenizer(tiny_dir)
    for step in (0, 1):
        write_step_batch(store, step, tok)
    t = trainer(store, tmp_path, tiny_cache, loss={"type": "grpo", "correction": {"type": "tis", "cap": 2.0}})
    t.run(until_version=2)
    t.close()
    table, _ = read_metrics(store, "trainer_steps")
    rows = table.sort_by("step").to_pylist()
    assert [r["step"] for r in rows] == [0, 1]
    for row in rows:
        assert 0 < row["is_truncated"] <= 1 and 0 < row["is_weight"] <= 2.0 and row["is_masked"] is None
        assert row["loss"] is not None and json.loads(row["extra"])["skipped_minibatches"] == 0


def test_the_lr_schedule_bf16_autocast_and_threads_reach_the_step(
    tmp_path: Path, tiny_cache: str, tiny_dir: str
) -> None:
    store = open_store(str(tmp_path / "lake"))
    tok = tokenizer(tiny_dir)
    for step in (0, 1, 2):
        write_step_batch(store, step, tok)
    t = trainer(store, tmp_path, tiny_cache, autocast="bfloat16", lr_schedule={"warmup_steps": 2})
    t.run(until_version=3)
    lrs = [json.loads(store.get(layout.trainer_stats_key(MODEL, s)))["lr"] for s in (0, 1, 2)]
    assert lrs == pytest.approx([5e-4, 1e-3, 1e-3])
    assert t.model is not None and all(p.dtype == torch.float32 for p in t.model.parameters())  # master weights
    resumed = trainer(store, tmp_path, tiny_cache, "resumed", lr_schedule={"warmup_steps": 8}, threads=1)
    write_step_batch(store, 3, tok)
    threads = torch.get_num_threads()
    try:
        resumed.run(until_version=4)  # the schedule is the step's: step 3 of an 8-step warmup
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    assert json.loads(store.get(layout.trainer_stats_key(MODEL, 3)))["lr"] == pytest.approx(0.5e-3)


def test_activation_checkpointing_trains_the_same_weights(tmp_path: Path, tiny_cache: str, tiny_dir: str) -> None:
    tok = tokenizer(tiny_dir)
    trained = []
    for recompute in (False, True):
        store = open_store(str(tmp_path / f"lake-{recompute}"))
        write_step_batch(store, 0, tok)
        t = trainer(store, tmp_path, tiny_cache, f"ckpt-{recompute}", activation_checkpointing=recompute)
        t.run(until_version=1)
        assert t.model is not None and t.model.is_gradient_checkpointing == recompute
        trained.append({n: p.detach().clone() for n, p in t.model.named_parameters()})
    plain, recomputed = trained
    assert plain.keys() == recomputed.keys()
    assert all(torch.allclose(plain[n], recomputed[n], rtol=0, atol=1e-6) for n in plain)


def test_activation_checkpointing_of_a_module_without_it_is_refused() -> None:
    from lakeflow.errors import ConfigError
    from lakeflow.trainer.model import checkpoint_activations

    with pytest.raises(ConfigError, match="activation_checkpointing: Linear does not support"):
        checkpoint_activations(torch.nn.Linear(2, 2))


@pytest.mark.parametrize("writer", ["process", "thread"])
def test_writes_behind_the_step_publish_the_same_chain_as_in_line(
    writer: str, tmp_path: Path, tiny_cache: str, tiny_dir: str
) -> None:
    """Reading ahead and writing behind training (in a spawned writer process, or a thread) changes when
    lake I/O happens, not what is trained: the same batches give the same published states, bit for bit,
    and the heartbeats account for the hand-over. The copy into shared memory is taken in the training
    thread before the next step starts (on CPU), so no later optimizer step can reach the published state."""
    tok = tokenizer(tiny_dir)
    digests = {}
    for overlap in (True, False):
        store = open_store(str(tmp_path / f"lake-{overlap}"))
        for step in (0, 1, 2):
            write_step_batch(store, step, tok)
        t = trainer(store, tmp_path, tiny_cache, f"work-{overlap}", overlap_io=overlap, writer=writer)
        t.run(until_version=3)
        assert t.published == t.version == 3  # run returns after the last publish
        digests[overlap] = [read_manifest(store, MODEL, v).state_sha256 for v in (1, 2, 3)]
        assert state_sha256(t.base) == digests[overlap][-1] == state_sha256(to_state(t.model))
        for step in (0, 1, 2):
            stats = json.loads(store.get(layout.trainer_stats_key(MODEL, step)))
            assert stats["load_s"] > 0 and stats["snapshot_s"] > 0 and stats["compute_s"] > 0
            blocked = stats["snapshot_s"] + stats["snapshot_block_s"] + stats["publish_block_s"]
            assert stats["io_block_s"] == pytest.approx(min(stats["wait_s"], stats["load_s"]) + blocked)
            assert (stats["publish_s"] > 0) == (step > 0)  # the previous step's writes, timed by the writer
            # one weight copy per step, one of the optimizer state with a checkpoint (a busy writer postpones it);
            # held: three weight slots and, from the first checkpoint on, the optimizer's
            assert stats["state_copies"] == 1 + stats["checkpointed"] and stats["state_buffers"] == 4
            assert stats["rss_peak_mb"] > 0 and stats["writer_rss_peak_mb"] > 0
        t.close()
    assert digests[True] == digests[False]
