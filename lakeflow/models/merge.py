"""A LoRA adapter merged into its base model: one ordinary Hugging Face checkpoint (`lakeflow weights merge`).

Each wrapped Linear's weight becomes W + (alpha / rank) * B @ A, computed in float32 and stored in the base
model's own dtype; the tokenizer and config are the base's.
"""

from __future__ import annotations

import json
import os

from lakeflow.errors import ConfigError, MissingExtraError


def merge_adapter(base_dir: str, adapter_dir: str, out_dir: str) -> str:
    """Write `base_dir`'s model with the PEFT adapter of `adapter_dir` merged in to `out_dir` (created; it must
    not hold a model already); returns `out_dir`."""
    try:
        import torch
        from peft import PeftModel
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise MissingExtraError("torch, transformers and peft", "train") from e
    if os.path.exists(os.path.join(out_dir, "config.json")):
        raise ConfigError(f"{out_dir} already holds a model: give a new directory to merge into")
    with open(os.path.join(base_dir, "config.json")) as f:
        config = json.load(f)
    stored = config.get("dtype") or config.get("torch_dtype") or "float32"
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    merged = PeftModel.from_pretrained(model, adapter_dir).merge_and_unload()
    merged.to(getattr(torch, stored)).save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(out_dir)
    return out_dir
