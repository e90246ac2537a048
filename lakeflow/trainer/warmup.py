"""The warm-up: supervised steps on demonstrations before the first published version (a cold start).

Recipes that teach a tool start this way: a few conversations that show the calls and their results, the
assistant's tokens trained with the SFT loss, then RL from those weights. The trainer runs it in `start()`
on a fresh model only, before version 0 is published, so version 0 *is* the warmed model: the rollout
services sample from it, the KL term's reference is it, and a restart finds version 0 and skips the warm-up.

The conversations and how they become tokens: `demos.py`. The warm-up has its own optimizer and learning
rate (dropped afterwards: RL starts with fresh AdamW moments, as from any version 0) and trains at
temperature 1 whatever the pool samples at.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import torch

from lakeflow.errors import ConfigError
from lakeflow.models.chat import chat_template_text
from lakeflow.trainer.config import KlConfig, SftLoss, TrainerConfig, WarmupConfig
from lakeflow.trainer.data import StepBatch
from lakeflow.trainer.demos import conversation_tokens, read_conversations, tokenizer_render
from lakeflow.trainer.losses import build_loss
from lakeflow.trainer.step import StepParts, train_step

log = logging.getLogger("lakeflow.trainer.warmup")


def tokenize(config: WarmupConfig, tokenizer: Any) -> list[tuple[list[int], list[int]]]:
    """Every conversation of `config.data` as (ids, mask); ConfigError naming a line that cannot be used."""
    template = chat_template_text(config.chat_template) if config.chat_template else None
    rows = []
    for number, row in enumerate(read_conversations(config.data), 1):
        ids, mask = conversation_tokens(tokenizer_render(tokenizer, row.get("tools"), template), row["messages"])
        if len(ids) > config.max_tokens:
            raise ConfigError(
                f"warmup.data: conversation {number} is {len(ids)} tokens, over warmup.max_tokens "
                f"({config.max_tokens}): shorten it or raise the limit"
            )
        rows.append((ids, mask))
    return rows


def pad(rows: Sequence[tuple[list[int], list[int]]], pad_id: int) -> StepBatch:
    """Conversations as a StepBatch for the SFT loss: right-padded, no behaviour logprobs or advantages."""
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.int64)
    attention = torch.zeros((len(rows), width), dtype=torch.int64)
    mask = torch.zeros((len(rows), width), dtype=torch.float32)
    for b, (ids, trained) in enumerate(rows):
        input_ids[b, : len(ids)] = torch.tensor(ids)
        attention[b, : len(ids)] = 1
        mask[b, : len(ids)] = torch.tensor(trained, dtype=torch.float32)
    mask[:, 0] = 0.0  # nothing predicts the first token
    zeros = torch.zeros(len(rows), dtype=torch.float32)
    lengths = torch.tensor([len(ids) for ids, _ in rows], dtype=torch.int64)
    versions = torch.full((len(rows),), -1, dtype=torch.int64)
    return StepBatch(input_ids, attention, mask, torch.zeros_like(mask), zeros, zeros, lengths, versions, versions)


def warm_up(model: Any, tokenizer: Any, config: TrainerConfig, device: str) -> list[float]:
    """Train `model` in place on `config.warmup`'s conversations; returns the loss of each step."""
    warmup = config.warmup
    assert warmup is not None
    rows = tokenize(warmup, tokenizer)
    sft = config.model_copy(update={"loss": SftLoss(), "kl": KlConfig(), "temperature": 1.0, "minibatches": 1})
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=warmup.lr, betas=config.betas, weight_decay=config.weight_decay)
    parts = StepParts(model, optimizer, build_loss(SftLoss()), sft, device)
    generator = torch.Generator().manual_seed(config.seed)
    order: list[int] = []
    losses = []
    pad_id = getattr(model.config, "pad_token_id", None) or 0
    started = time.monotonic()
    for step in range(warmup.steps):
        while len(order) < warmup.batch_size:  # shuffled passes over the file
            order += torch.randperm(len(rows), generator=generator).tolist()
        chosen, order = order[: warmup.batch_size], order[warmup.batch_size :]
        metrics = train_step(parts, pad([rows[i] for i in chosen], pad_id))
        losses.append(float(metrics["loss"]))
        if step == 0 or (step + 1) % 10 == 0 or step + 1 == warmup.steps:
            log.info("warm-up step %d/%d: loss %.4f", step + 1, warmup.steps, losses[-1])
    log.info(
        "warm-up: %d steps on %d conversations of %s in %.1fs, loss %.4f -> %.4f",
        warmup.steps, len(rows), warmup.data, time.monotonic() - started, losses[0], losses[-1],
    )  # fmt: skip
    return losses
