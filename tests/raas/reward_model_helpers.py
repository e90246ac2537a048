"""Shared by the reward-model tests: a tiny sequence-classification model built here from the tiny recipe's
tokenizer (a random Qwen2 body and score head: its scores mean nothing, but they are a real transformers
forward that the scorer must reproduce), and a direct forward to compare the scorer with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, Qwen2Config, Qwen2ForSequenceClassification


def build_reward_model(dest: Path, tokenizer_dir: str, num_labels: int = 1, vocab_size: int | None = None) -> str:
    """A ~0.2M-parameter Qwen2ForSequenceClassification with `num_labels` outputs and the tiny tokenizer,
    saved to `dest`. `vocab_size` below the tokenizer's makes a model that fails on most inputs."""
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=vocab_size or len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=512,
        num_labels=num_labels,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    Qwen2ForSequenceClassification(config).save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return str(dest)


def direct_scores(model_dir: str, texts: list[str], label: int = 0) -> list[float]:
    """Each text's `label` logit from a plain transformers forward, one text at a time (no padding)."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model: Any = AutoModelForSequenceClassification.from_pretrained(model_dir, dtype=torch.float32).eval()
    out = []
    with torch.inference_mode():
        for text in texts:
            ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
            out.append(float(model(input_ids=ids).logits[0, label]))
    return out
