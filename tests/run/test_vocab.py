"""A run's dataflow vocabulary comes from the trainer's model; a config that contradicts it is refused by the
run's check, one line naming the key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lakeflow.errors import ConfigError
from lakeflow.models.tiny import TINY_VOCAB
from lakeflow.run import load_run_config
from lakeflow.run.check import check_run_config


def _write(tmp_path: Path, model: str, dataflow: dict[str, Any]) -> Path:
    config = {
        "name": "vocab",
        "steps": 1,
        "models": [
            {"id": "policy", "dataflow": {"dataset": {"type": "synthetic"}, **dataflow}, "trainer": {"model": model}}
        ],
    }
    path = tmp_path / "run.json"
    path.write_text(json.dumps(config))
    return path


def test_the_vocabulary_is_read_from_tiny_models_and_directories(tmp_path: Path) -> None:
    run = load_run_config(_write(tmp_path, "tiny:default", {}))
    assert run.dataflow().model("policy").vocab_size == TINY_VOCAB
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps({"vocab_size": 49152}))
    run = load_run_config(_write(tmp_path, str(model_dir), {}))
    assert run.dataflow().model("policy").vocab_size == 49152


def test_a_contradicting_vocabulary_is_refused_with_the_key(tmp_path: Path) -> None:
    run = load_run_config(_write(tmp_path, "tiny:default", {"vocab_size": 1000}))
    (problem,) = check_run_config(run)
    assert problem.startswith("models[0].dataflow.vocab_size: 1000 contradicts 'tiny:default', whose vocabulary is 512")
    with pytest.raises(ConfigError, match="contradicts"):
        run.dataflow()  # never handed to the dataflow process


def test_an_unreadable_model_needs_the_key_and_takes_it(tmp_path: Path) -> None:
    run = load_run_config(_write(tmp_path, "nobody/nothing", {}))
    (problem,) = check_run_config(run)
    assert problem.startswith(
        "models[0].dataflow.vocab_size: not set, and the vocabulary of 'nobody/nothing' cannot be read here"
    )
    run = load_run_config(_write(tmp_path, "nobody/nothing", {"vocab_size": 7}))
    assert run.dataflow().model("policy").vocab_size == 7
