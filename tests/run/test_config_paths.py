"""Relative data and policy paths in a run config are found from the config file's folder, so a job
runs from any working directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakeflow.run import load_run_config

CONFIG = Path(__file__).resolve().parents[2] / "jobs" / "examples" / "tiny-math.yaml"


def test_paths_resolve_from_the_config_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_run_config(CONFIG)
    dataset = config.models[0].dataflow["dataset"]["path"]
    assert Path(dataset).is_file() and Path(dataset).is_absolute()
    assert config.models[0].eval is not None and Path(config.models[0].eval.dataset.path).is_file()  # type: ignore[union-attr]


def test_paths_that_only_exist_from_the_working_directory_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "here.jsonl").write_text('{"prompt": "1+1", "answer": "2"}\n')
    text = CONFIG.read_text().replace("path: data/sevens.jsonl", "path: here.jsonl")
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "run.yaml").write_text(text.replace("path: data/sevens-heldout.jsonl", "path: here.jsonl"))
    monkeypatch.chdir(tmp_path)
    config = load_run_config(tmp_path / "job" / "run.yaml")
    assert config.models[0].dataflow["dataset"]["path"] == "here.jsonl"
