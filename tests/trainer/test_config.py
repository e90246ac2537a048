"""Trainer configs: defaults parse, loss variants are told apart by `type`, unknown keys name the key and file."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakeflow.errors import ConfigError
from lakeflow.trainer.config import M2poLoss, load_config


def test_variants_and_unknown_keys(tmp_path: Path) -> None:
    good = tmp_path / "t.yaml"
    good.write_text("model: tiny:x\nloss: {type: m2po, m2_threshold: 0.1}\nkl: {coef: 0.01, estimator: k2}\n")
    config = load_config(good)
    assert isinstance(config.loss, M2poLoss) and config.loss.m2_threshold == 0.1 and config.dtype == "float32"
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: tiny:x\nloss: {type: grpo, clip: 0.2}\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml.*loss\.grpo\.clip"):
        load_config(bad)


@pytest.mark.parametrize(
    "path", sorted((Path(__file__).resolve().parents[2] / "jobs").rglob("trainer*.yaml")), ids=lambda p: p.name
)
def test_every_trainer_config_in_jobs_parses(path: Path) -> None:
    assert path.read_text().startswith("# lakeflow train ")  # opens with the command that launches it
    load_config(path)


def test_lr_schedule_warms_up_then_decays_to_its_floor() -> None:
    from lakeflow.trainer.config import LrSchedule

    assert [LrSchedule().factor(s) for s in (0, 5, 500)] == [1.0, 1.0, 1.0]
    warm = LrSchedule(warmup_steps=4)
    assert [warm.factor(s) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    linear = LrSchedule(warmup_steps=2, decay="linear", decay_steps=4, min_ratio=0.2)
    assert [round(linear.factor(s), 6) for s in range(9)] == [0.5, 1.0, 1.0, 0.8, 0.6, 0.4, 0.2, 0.2, 0.2]
    cosine = LrSchedule(decay="cosine", decay_steps=10)
    assert cosine.factor(0) == 1.0 and cosine.factor(5) == pytest.approx(0.5) and cosine.factor(10) == 0.0
    assert cosine.factor(3) > 1 - 0.3  # a cosine stays above the straight line in its first half


def test_a_decay_without_its_length_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("model: tiny:trainer\nlr_schedule: {decay: cosine}\n")
    with pytest.raises(ConfigError, match="decay_steps"):
        load_config(path)


@pytest.mark.parametrize("host", ["bfloat16", "float32"])
def test_publish_dtype_fastest_follows_the_host_and_must_match_what_is_published(
    tmp_path: Path, host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch
    from safetensors.torch import save_file

    from lakeflow.errors import ConfigError
    from lakeflow.trainer import config as trainer_config
    from lakeflow.trainer.config import TrainerConfig, publish_dtype_for
    from lakeflow.trainer.model import published_dtype

    monkeypatch.setattr(trainer_config, "fastest_dtype", lambda device: host)
    fastest = TrainerConfig(model="tiny:x", publish_dtype="fastest")
    assert publish_dtype_for(fastest, "bfloat16") == host  # bfloat16 where native, else the master weights'
    assert publish_dtype_for(TrainerConfig(model="tiny:x"), "bfloat16") == "bfloat16"  # unset: the model's own
    save_file({"w": torch.zeros(2, dtype=torch.bfloat16)}, str(tmp_path / "model.safetensors"))
    if host == "bfloat16":
        assert published_dtype(str(tmp_path), fastest) == "bfloat16"
    else:
        with pytest.raises(ConfigError, match=r"publish_dtype: fastest \(float32 here\) differs from the published"):
            published_dtype(str(tmp_path), fastest)
