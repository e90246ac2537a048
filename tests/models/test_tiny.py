"""The locally built tiny model: a real Hugging Face directory that transformers loads and runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakeflow.models import resolve_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def test_tiny_model_is_built_once_and_generates(tmp_path: Path) -> None:
    path = resolve_model("tiny:t", tmp_path)
    assert (Path(path) / "model.safetensors").exists() and (Path(path) / "tokenizer.json").exists()
    mtime = (Path(path) / "model.safetensors").stat().st_mtime_ns
    assert resolve_model("tiny:t", tmp_path) == path  # cached: not rebuilt
    assert (Path(path) / "model.safetensors").stat().st_mtime_ns == mtime
    model = transformers.AutoModelForCausalLM.from_pretrained(path)
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    assert model.config.head_dim == 64 and len(tokenizer) == model.config.vocab_size == 512
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2 + 3 * 4?"}], add_generation_prompt=True)
    ids = ids if isinstance(ids, list) else ids["input_ids"]
    assert tokenizer.decode(ids).endswith("<|im_start|>assistant\n")
    out = model.generate(torch.tensor([ids]), max_new_tokens=4, do_sample=False)
    assert out.shape == (1, len(ids) + 4) and int(out.max()) < 512


def test_other_references_pass_through() -> None:
    assert resolve_model("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"  # a hub id, for users who can
    assert resolve_model("/models/mine") == "/models/mine"
