"""Qwen2-shaped models for the GPU check, initialised locally (no hub download) and saved as Hugging
Face directories the trainer and the transformers engine load like any other model.

The shapes are those of Qwen2.5-0.5B and -1.5B (random weights: throughput does not depend on
them); the tokenizer is the tiny model's (`lakeflow.models`), whose ids all lie below the vocabulary.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lakeflow.models import resolve_model

# Files of the tiny model's directory that are its weights or config, not its tokenizer.
_NOT_TOKENIZER = {"model.safetensors", "config.json", "generation_config.json", "lakeflow-tiny.json"}


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a Qwen2 decoder (tied embeddings)."""

    name: str
    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int


SHAPES = {
    "qwen2-0.5b": ModelShape("qwen2-0.5b", 151_936, 896, 4864, 24, 14, 2),
    "qwen2-1.5b": ModelShape("qwen2-1.5b", 151_936, 1536, 8960, 28, 12, 2),
    "tiny": ModelShape("tiny", 8192, 128, 512, 2, 2, 1),  # the CPU dry run: 1.5M parameters
    # SmolLM2-135M's sizes as a Qwen2 (`python -m benchmarks trainer` on CPU: writes large against compute)
    "smollm2-135m": ModelShape("smollm2-135m", 49_152, 576, 1536, 30, 9, 3),
    "qwen2-25m": ModelShape("qwen2-25m", 32_768, 384, 1024, 8, 6, 2),  # the same on a busy or small CPU
}


def build_model_dir(shape: ModelShape, dest: str | Path, device: str, cache_dir: str | Path) -> str:
    """Write a randomly initialised bf16 Qwen2 of `shape` with the tiny tokenizer to `dest`; returns it.

    The weights are initialised on `device` (seconds on a GPU, minutes for 1.5B on a CPU)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    tokenizer_dir = Path(resolve_model("tiny:gpu-check", cache_dir))
    tiny: Any = Qwen2Config.from_pretrained(tokenizer_dir)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for name in os.listdir(tokenizer_dir):
        if name not in _NOT_TOKENIZER:
            shutil.copy(tokenizer_dir / name, dest / name)
    config = Qwen2Config(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=tiny.eos_token_id,
        pad_token_id=tiny.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model: Any = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)  # type: ignore[no-untyped-call]
    model.save_pretrained(dest, safe_serialization=True)
    del model
    return str(dest)
