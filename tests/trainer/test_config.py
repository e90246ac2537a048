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
