"""LoRA in the trainer: only the adapter trains and is published (adapter versions after a full version 0),
a resume continues the adapter, and settings that cannot work are refused before any step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lakeflow.errors import ConfigError
from lakeflow.io import Store, open_store
from lakeflow.trainer import Trainer, load_config
from lakeflow.trainer.model import load_model
from lakeflow.weights import load_state, pull, read_manifest, state_sha256
from lakeflow.weights.pull import ADAPTER_FILE
from tests.trainer.helpers import MODEL, tokenizer, write_config, write_step_batch

pytest.importorskip("peft")

LORA = {"rank": 4, "alpha": 8.0, "targets": ["q_proj", "v_proj"]}
FAST = {"writer": "thread", "mismatch_versions": 0}  # no spawned writer process to start: the same writes


def trainer(store: Store, tmp_path: Path, cache: str, name: str = "work", **overrides: object) -> Trainer:
    config = load_config(write_config(tmp_path / f"{name}.yaml", cache, **overrides))
    return Trainer(store, MODEL, config, str(tmp_path / name))


def test_lora_trains_only_the_adapter_and_publishes_adapter_versions(
    tmp_path: Path, tiny_cache: str, tiny_dir: str
) -> None:
    store = open_store(str(tmp_path / "lake"))
    tok = tokenizer(tiny_dir)
    for step in range(3):
        write_step_batch(store, step, tok)
    t = trainer(store, tmp_path, tiny_cache, lora=LORA, lr=1e-2, **FAST)
    t.start()
    frozen = {n: p.detach().clone() for n, p in t.model.named_parameters() if not p.requires_grad}
    trained = {n: p.detach().clone() for n, p in t.model.named_parameters() if p.requires_grad}
    optimized = {id(p) for g in t.optimizer.param_groups for p in g["params"]}  # type: ignore[union-attr]
    assert trained and all("lora_" in n for n in trained)
    assert optimized == {id(p) for n, p in t.model.named_parameters() if n in trained}
    t.run(until_version=3)
    t.close()
    after = dict(t.model.named_parameters())
    assert all(torch.equal(after[n], v) for n, v in frozen.items()), "a frozen base weight changed"
    assert any("lora_B" in n and not torch.equal(after[n], v) for n, v in trained.items()), "the adapter did not train"

    base, first = read_manifest(store, MODEL, 0), read_manifest(store, MODEL, 1)
    assert base.adapter is None and base.kind == "full"
    assert first.adapter is not None and first.adapter.rank == 4 and first.adapter.targets == ["q_proj", "v_proj"]
    assert first.shown_kind() == "adapter" and first.state_bytes < base.state_bytes / 20
    assert {e.name for e in first.files} == {"adapter_config.json"}
    # every adapter version pulls into a directory PEFT loads, verified against its manifest
    for version in (1, 2, 3):
        dest = tmp_path / f"v{version}"
        pull(store, MODEL, str(dest), version)
        assert (dest / ADAPTER_FILE).exists() and (dest / "adapter_config.json").exists()
        assert state_sha256(load_state(str(dest))) == read_manifest(store, MODEL, version).state_sha256
    from peft import PeftModel

    served = PeftModel.from_pretrained(load_model(tiny_dir, "float32"), str(tmp_path / "v3"))
    live = {n: p for n, p in t.model.named_parameters() if p.requires_grad}
    assert all(torch.equal(p, live[n]) for n, p in served.named_parameters() if n in live)

    # a resume loads version 0 and the newest adapter, and trains on
    write_step_batch(store, 3, tok)
    again = trainer(store, tmp_path, tiny_cache, name="again", lora=LORA, lr=1e-2, **FAST)
    assert again.start() == 3
    assert all(torch.equal(p, live[n]) for n, p in again.model.named_parameters() if n in live)
    again.run(until_version=4)
    again.close()
    assert read_manifest(store, MODEL, 4).adapter is not None


def test_lora_settings_that_cannot_work_are_refused(tmp_path: Path, tiny_cache: str) -> None:
    store = open_store(str(tmp_path / "lake"))
    t = trainer(store, tmp_path, tiny_cache, lora={**LORA, "targets": ["q_proj", "attn_proj"]})
    with pytest.raises(ConfigError, match=r"attn_proj matches no Linear module.*k_proj.*q_proj"):
        t.start()
    with pytest.raises(ValueError, match="distinct"):
        load_config(write_config(tmp_path / "dup.yaml", tiny_cache, lora={**LORA, "targets": ["q_proj", "q_proj"]}))


def test_the_check_before_start_names_the_models_modules(tiny_dir: str) -> None:
    from lakeflow.trainer.check import check_trainer_here
    from lakeflow.trainer.config import TrainerConfig

    good = TrainerConfig(model=tiny_dir, lora={"targets": ["q_proj", "model.layers.0.mlp.down_proj"]})
    assert check_trainer_here(good, "trainer") == []
    bad = TrainerConfig(model=tiny_dir, lora={"targets": ["q_proj", "qkv_proj"]})
    (problem,) = check_trainer_here(bad, "trainer")
    assert problem.startswith(f"trainer.lora.targets: qkv_proj is no module of {tiny_dir}; its Linear modules are:")
    assert "k_proj, o_proj, q_proj" in problem and "embed" not in problem
