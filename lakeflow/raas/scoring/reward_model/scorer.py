"""`RewardModel`: a transformers sequence classifier loaded once, on its device, in eval mode, that scores
(task messages, completion) pairs in batches.

Each pair becomes one token sequence (`input`: chat, the messages and the completion as an assistant turn
rendered with the model's own chat template; text, the prompt, a newline, the completion). A sequence over
`max_length` keeps its last tokens: the score is read at the last token, so the completion must stay and the
start of the prompt goes. Sequences are sorted by length, padded on the right with the model's pad token
(the tokenizer's, else its eos, when config.json has none) and run `batch_size` at a time under
`torch.inference_mode`; transformers pools each at its last token that is not the pad token, as the model was
trained. The score is the `label` logit, in float32; a non-finite one is an error, never a reward.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lakeflow.errors import ConfigError, MissingExtraError
from lakeflow.raas.config.reward_model import RewardModelConfig
from lakeflow.raas.engines import ChatMessage
from lakeflow.raas.scoring.reward_model.check import architecture_problem, label_problem


@dataclass(frozen=True)
class Scored:
    """One pair's score: the raw logit, and whether its input was cut to max_length."""

    logit: float
    truncated: bool


def text_form(messages: Sequence[ChatMessage], completion: str) -> str:
    """The pair as plain text: the prompt (one user message's content, else each message under [role]), a
    newline, the completion."""
    if len(messages) == 1 and messages[0]["role"] == "user":
        prompt = str(messages[0]["content"])
    else:
        prompt = "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in messages)
    return f"{prompt}\n{completion}"


class RewardModel:
    """The loaded reward model (see the module docstring); `score` runs it, `close` frees it."""

    def __init__(self, config: RewardModelConfig) -> None:
        try:
            self.torch: Any = importlib.import_module("torch")
            tf: Any = importlib.import_module("transformers")  # untyped for mypy: its stubs lag its API
        except ImportError as e:
            raise MissingExtraError("torch and transformers", "train") from e
        self.config = config
        torch = self.torch
        if config.device == "auto":
            self.device = "cuda" if torch.cuda.is_available() else "cpu"
        else:
            self.device = config.device
        try:
            self.tokenizer = tf.AutoTokenizer.from_pretrained(config.model)
            model_config = tf.AutoConfig.from_pretrained(config.model)
        except (OSError, ValueError) as e:
            raise ConfigError(f"reward.model {config.model!r} cannot be loaded: {e}") from e
        problem = architecture_problem(model_config.architectures) or label_problem(
            model_config.num_labels, config.label
        )
        if problem is not None:
            raise ConfigError(f"reward.model {config.model!r}: {problem}")
        if config.dtype != "auto":
            dtype = getattr(torch, config.dtype)
        elif self.device == "cpu":
            dtype = torch.float32
        else:
            dtype = "auto"  # the model's own
        model = tf.AutoModelForSequenceClassification.from_pretrained(config.model, dtype=dtype)
        self.pad_id = self._pad_id(model.config)
        self.model: Any = model.to(self.device).eval()
        self.label = config.label or 0
        self.chat = config.input == "chat" and bool(getattr(self.tokenizer, "chat_template", None))

    def _pad_id(self, model_config: Any) -> int:
        """The id the batches are padded with, which transformers' pooling skips: config.json's pad token, else
        the tokenizer's pad token, else its eos (then set on the model's config, which needs one for batches)."""
        text_config = model_config.get_text_config()
        pad = text_config.pad_token_id
        if pad is None:
            tokens = self.tokenizer
            pad = tokens.pad_token_id if tokens.pad_token_id is not None else tokens.eos_token_id
            if pad is None:
                raise ConfigError(
                    f"reward.model {self.config.model!r} has no pad token and no eos token to pad batches with: "
                    "set pad_token_id in its config.json"
                )
            text_config.pad_token_id = model_config.pad_token_id = pad
        return int(pad)

    def encode(self, messages: Sequence[ChatMessage], completion: str) -> list[int]:
        """The token ids the model reads for one pair, before truncation."""
        if self.chat:
            turns = [*messages, {"role": "assistant", "content": completion}]
            text = self.tokenizer.apply_chat_template(turns, tokenize=False)
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return list(self.tokenizer(text_form(messages, completion))["input_ids"])

    def score(self, pairs: Sequence[tuple[Sequence[ChatMessage], str]]) -> list[Scored]:
        """The score of each (messages, completion) pair, in order. Raises what the forward raises (out of
        memory, a bad input), and ValueError for a non-finite score."""
        torch, limit = self.torch, self.config.max_length
        encoded = [self.encode(messages, completion) for messages, completion in pairs]
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))  # alike lengths pad little
        logits: list[float] = [0.0] * len(encoded)
        with torch.inference_mode():
            for start in range(0, len(order), self.config.batch_size):
                chunk = order[start : start + self.config.batch_size]
                rows = [encoded[i][-limit:] for i in chunk]
                width = max(len(r) for r in rows)
                ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
                mask = torch.zeros((len(rows), width), dtype=torch.long)
                for j, row in enumerate(rows):
                    ids[j, : len(row)] = torch.tensor(row, dtype=torch.long)
                    mask[j, : len(row)] = 1
                out = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
                for i, value in zip(chunk, out[:, self.label].float().cpu().tolist(), strict=True):
                    logits[i] = value
        bad = [i for i, v in enumerate(logits) if not math.isfinite(v)]
        if bad:
            raise ValueError(f"the reward model gave non-finite scores ({logits[bad[0]]}) for inputs {bad}")
        return [Scored(v, len(e) > limit) for v, e in zip(logits, encoded, strict=True)]

    def close(self) -> None:
        """Free the model (and the accelerator's cached memory)."""
        self.model = None
        if self.device != "cpu" and self.torch.cuda.is_available():
            self.torch.cuda.empty_cache()
