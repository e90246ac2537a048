"""A run whose pool has teachers: the served pool a teacher names (not a trained model), its endpoint set by
`lakeflow run`, a teacher of another vocabulary refused before start, distillation without teachers refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lakeflow.run.check import check_run_config, check_run_here
from lakeflow.run.config import RunConfig
from lakeflow.run.processes import with_judge_endpoints


def config(teachers: list[dict[str, Any]], serve: list[dict[str, Any]], model: str = "tiny:x", **trainer: Any) -> Any:
    m = {
        "id": "policy",
        "dataflow": {"vocab_size": 512, "dataset": {"type": "synthetic"}},
        "trainer": {"model": model, **trainer},
        "raas": {"config": {"teachers": teachers}},
        "regions": [{"region": "eu", "config": {"teachers": teachers}}],
    }
    return RunConfig.model_validate({"name": "c", "steps": 1, "models": [m], "serve": serve})


def test_a_teacher_names_a_served_pool_whose_url_the_run_gives_it() -> None:
    with pytest.raises(ValueError, match="a model this run trains; a teacher is frozen"):
        config([{"pool": "policy"}], [])
    with pytest.raises(ValueError, match="which the run does not serve"):
        config([{"pool": "teacher"}], [])
    run = config([{"pool": "teacher"}], [{"id": "teacher", "model": "tiny:x"}])
    served = with_judge_endpoints(run, {"teacher": "http://127.0.0.1:1234/v1"})
    assert served.models[0].raas.config.teachers[0].endpoint == "http://127.0.0.1:1234/v1"
    assert served.models[0].regions[0].config["teachers"][0]["endpoint"] == "http://127.0.0.1:1234/v1"


def test_distillation_without_teachers_is_refused() -> None:
    run = config([], [], advantages={"distill": {"weight": 1.0}})
    assert any("advantages.distill: the model's rollout pool has no teachers" in p for p in check_run_config(run))


def _model(path: Path, vocab: dict[str, int]) -> str:
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"vocab_size": 512}))
    (path / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}, "added_tokens": []}))
    return str(path)


def test_a_teacher_of_another_vocabulary_is_refused_before_start(tmp_path: Path) -> None:
    student = _model(tmp_path / "student", {"a": 0, "b": 1})
    same = _model(tmp_path / "same", {"a": 0, "b": 1})
    other = _model(tmp_path / "other", {"a": 1, "b": 0})
    ok = config([{"pool": "teacher"}], [{"id": "teacher", "model": same}], model=student)
    assert not any("teachers" in p for p in check_run_here(ok))
    bad = config([{"pool": "teacher"}], [{"id": "teacher", "model": other}], model=student)
    problems = [p for p in check_run_here(bad) if "teachers" in p]
    assert problems and problems[0].startswith("models[0].raas.config.teachers[0]: teacher 'teacher'")
    assert "another vocabulary than the student" in problems[0]
