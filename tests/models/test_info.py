"""The facts of a model read from its files without loading it, and what a machine must have to load it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lakeflow.errors import ConfigError
from lakeflow.models import resolve_model
from lakeflow.models.check import device_problem, model_problem
from lakeflow.models.info import ModelInfo, model_vocab_size, read_model_info


def write_model(
    path: Path, config: dict[str, object], tokenizer: dict[str, object], files: dict[str, str] | None = None
) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config))
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer))
    for name, text in (files or {}).items():
        (path / name).write_text(text)
    return path


def test_the_facts_come_from_config_generation_config_and_the_tokenizer(tmp_path: Path) -> None:
    tokens = {"added_tokens": [{"id": 0, "content": "<|endoftext|>"}, {"id": 2, "content": "<|im_end|>"}]}
    path = write_model(
        tmp_path / "m",
        {"vocab_size": 49152, "max_position_embeddings": 8192, "eos_token_id": 2},
        {"eos_token": "<|im_end|>", "pad_token": {"content": "<|endoftext|>"}},
        {
            "generation_config.json": json.dumps({"eos_token_id": [2, 7]}),
            "tokenizer.json": json.dumps(tokens),
            "chat_template.jinja": "{{ messages }}",
        },
    )
    assert read_model_info(str(path)) == ModelInfo(str(path), 49152, 8192, (2, 7), 0, True)
    assert model_vocab_size(str(path)) == 49152


def test_a_multimodal_config_and_a_model_without_a_template(tmp_path: Path) -> None:
    decoder = {"5": {"content": "</s>"}}
    path = write_model(
        tmp_path / "m",
        {"text_config": {"vocab_size": 100, "max_position_embeddings": 64}},
        {"eos_token": "</s>", "added_tokens_decoder": decoder},
    )
    assert read_model_info(str(path)) == ModelInfo(str(path), 100, 64, (5,), None, False)


def test_a_changed_file_is_read_again_and_a_broken_one_is_named(tmp_path: Path) -> None:
    path = write_model(tmp_path / "m", {"vocab_size": 10}, {})
    assert model_vocab_size(str(path)) == 10
    (path / "config.json").write_text(json.dumps({"vocab_size": 12, "pad": "longer than before"}))
    assert model_vocab_size(str(path)) == 12
    (path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"cannot read the model's config\.json"):
        read_model_info(str(path))


def test_what_cannot_be_read_here(tmp_path: Path) -> None:
    assert read_model_info(str(tmp_path / "nothing")) is None
    assert read_model_info(str(tmp_path)) is None  # a directory without config.json
    assert read_model_info("nobody/nothing") is None  # a hub id that is not in the cache


@pytest.mark.parametrize(("ref", "shape"), [("tiny:facts", (512, 512)), ("tiny:long", (4096, 32768))])
def test_the_tiny_recipes_facts_are_those_of_the_built_model(tmp_path: Path, ref: str, shape: tuple[int, int]) -> None:
    pytest.importorskip("transformers")
    built = read_model_info(resolve_model(ref, tmp_path))
    recipe = read_model_info(ref)
    assert built is not None and recipe is not None
    assert (recipe.vocab_size, recipe.max_positions) == shape  # tiny:long: the coding harnesses' recipe
    assert (built.vocab_size, built.max_positions, built.eos_token_ids, built.pad_token_id, built.chat_template) == (
        recipe.vocab_size,
        recipe.max_positions,
        recipe.eos_token_ids,
        recipe.pad_token_id,
        recipe.chat_template,
    )


def test_model_problems(tmp_path: Path) -> None:
    assert model_problem("tiny:anything") is None
    path = write_model(tmp_path / "m", {"vocab_size": 10}, {})
    assert "holds no weights" in (model_problem(str(path)) or "")
    (path / "model.safetensors").write_bytes(b"")
    assert model_problem(str(path)) is None
    assert "is a file, not a model directory" in (model_problem(str(path / "config.json")) or "")
    assert "no config.json" in (model_problem(str(tmp_path)) or "")
    assert (model_problem("./not/here") or "").startswith("no model directory at ./not/here")


def test_device_problems() -> None:
    assert device_problem("cpu") is None
    pytest.importorskip("torch")
    assert "is not a torch device" in (device_problem("gpu") or "")
    assert device_problem("cpu:0") is None
    assert "but this machine has" in (device_problem("cuda:64") or "")
