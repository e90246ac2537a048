"""What every inference engine is: the `Engine` interface, the completion it returns, and the token side
the shipped engines share (chat template, decoding, argument checks, `config.json` comparison).

Logprobs are those of the *tempered* sampling distribution, log softmax(logits / T)[token], with no
top-k/top-p truncation: exactly the distribution the tokens were drawn from, so a trainer that divides
its logits by the same T (stamped on every sample as `extra.temperature`) gets the importance ratio
pi_theta / pi_behaviour right.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from lakeflow.errors import ConfigError
from lakeflow.models.chat import chat_template_text

ChatMessage = Mapping[str, str]  # {"role": ..., "content": ...}
Prompt = Sequence[ChatMessage] | Sequence[int]  # chat messages, or token ids continued as they are
FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class Completion:
    """One sampled completion of one prompt."""

    prompt_ids: list[int]
    token_ids: list[int]  # the sampled tokens, up to and including the stop token
    logprobs: list[float]  # log p_T(token | prefix) of each sampled token, tempered by T
    finish_reason: FinishReason  # "stop": a stop token was sampled; "length": max_tokens reached
    text: str  # token_ids decoded, special tokens dropped


class Engine(Protocol):
    """What a workflow needs from an inference engine."""

    max_model_len: int  # longest prompt + completion, in tokens

    def load(self, model_dir: str) -> None:
        """Load (or reload in place, between generations) the weights of a Hugging Face directory."""

    def encode_chat(
        self,
        messages: Sequence[ChatMessage],
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[int]:
        """Token ids of chat messages under the model's chat template (`tools`: function schemas it renders)."""

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of token ids, special tokens dropped."""

    def generate(
        self, prompts: Sequence[Prompt], n: int, max_tokens: int, temperature: float
    ) -> list[list[Completion]]:
        """`n` completions of each prompt, sampled at `temperature`, with tempered logprobs."""


@runtime_checkable
class ChoiceScorer(Protocol):
    """An engine that can weigh given continuations of a prompt (constrained choice: a judge's verdict)."""

    def choice_logprobs(self, prompt_ids: Sequence[int], choices: Sequence[str]) -> list[float]:
        """log p(choice | prompt) of each choice's text (tokenized on its own), summed over its tokens, at
        temperature 1."""
        ...


@runtime_checkable
class TokenScorer(Protocol):
    """An engine that scores given token ids (a teacher's logprobs of a student's sampled tokens)."""

    def token_logprobs(
        self, rows: Sequence[tuple[Sequence[int], Sequence[int]]], temperature: float
    ) -> list[list[float]]:
        """For each (prompt ids, response ids): log p(response token t | prompt, response tokens < t) at
        `temperature` (logits / temperature), one value per response token."""
        ...


def tokenizer_fingerprint(tokenizer: Any) -> str | None:
    """A short fingerprint of a tokenizer's vocabulary (token -> id, added tokens included); None when it
    has none to read. Two tokenizers with the same fingerprint give the same ids to the same tokens."""
    get_vocab = getattr(tokenizer, "get_vocab", None)
    if get_vocab is None:
        return None
    vocab = sorted(get_vocab().items(), key=lambda kv: kv[1])
    return hashlib.sha256(json.dumps(vocab).encode()).hexdigest()[:12]


def check_score_rows(rows: Sequence[tuple[Sequence[int], Sequence[int]]], limit: int) -> None:
    """ValueError for a row the scorer cannot take: an empty prompt (nothing predicts its first token), or a
    prompt and response longer than `limit` tokens."""
    for i, (prompt, response) in enumerate(rows):
        if not prompt:
            raise ValueError(f"row {i}: the prompt is empty; its first token cannot be scored")
        if len(prompt) + len(response) > limit:
            raise ValueError(f"row {i}: {len(prompt)} prompt and {len(response)} response tokens exceed {limit}")


def choice_rows(tokenizer: Any, prompt_ids: Sequence[int], choices: Sequence[str], limit: int) -> list[list[int]]:
    """The prompt followed by each choice's tokens (the choice tokenized on its own); ValueError for an empty
    prompt or choice, or a row longer than `limit` tokens."""
    prompt = [int(t) for t in prompt_ids]
    encoded = [[int(t) for t in tokenizer.encode(c, add_special_tokens=False)] for c in choices]
    if not prompt or not encoded or any(not c for c in encoded):
        raise ValueError("choice_logprobs needs a prompt and choices that are not empty")
    rows = [prompt + c for c in encoded]
    if max(len(r) for r in rows) > limit:
        raise ValueError(f"the prompt of {len(prompt)} tokens and a choice exceed {limit} tokens")
    return rows


def set_chat_template(engine: Engine, setting: str | None) -> None:
    """Have `engine` render chat with the template a `chat_template:` setting names (a shipped name or a
    Jinja file; None: its model's own). The shipped engines (and any `TokenizedEngine`) take it; ConfigError
    for a setting that names no template, or an engine that renders chat its own way."""
    if setting is None:
        return
    try:
        template = chat_template_text(setting)
    except ConfigError as e:
        raise ConfigError(f"chat_template: {e}") from e
    if not isinstance(engine, TokenizedEngine):
        raise ConfigError(
            f"chat_template: the engine {type(engine).__name__} renders chat itself (its own encode_chat), so "
            "lakeflow cannot give it a template: leave chat_template out, or subclass "
            "lakeflow.raas.engines.TokenizedEngine"
        )
    engine.use_chat_template(template)


def is_token_ids(prompt: Prompt) -> bool:
    return all(isinstance(t, int) for t in prompt)


def chat_token_ids(
    tokenizer: Any,
    messages: Sequence[ChatMessage],
    add_generation_prompt: bool = True,
    tools: Sequence[Mapping[str, Any]] | None = None,
    chat_template: str | None = None,
) -> list[int]:
    """Token ids of chat messages through the tokenizer's chat template (shared by every engine); `tools`
    (function schemas) go to the template's `tools=`, so the model sees them in its own format;
    `chat_template` (Jinja text) replaces the tokenizer's own."""
    ids = tokenizer.apply_chat_template(
        [dict(m) for m in messages],
        add_generation_prompt=add_generation_prompt,
        tools=[dict(t) for t in tools] if tools else None,
        chat_template=chat_template,
        return_dict=False,
    )
    return [int(t) for t in ids]


def decode_text(tokenizer: Any, token_ids: Sequence[int]) -> str:
    """Text of generated token ids, special tokens dropped."""
    return str(tokenizer.decode(list(token_ids), skip_special_tokens=True))


def check_sampling(n: int, max_tokens: int, temperature: float) -> None:
    """ValueError for sampling arguments no engine accepts. Temperature 0 is greedy decoding (evaluation):
    the logprobs are then those of the untempered distribution, log softmax(logits)."""
    if n < 1 or max_tokens < 1 or temperature < 0:
        raise ValueError(f"need n >= 1, max_tokens >= 1, temperature >= 0; got {n}, {max_tokens}, {temperature}")


class TokenizedEngine:
    """The token side both engines share: their tokenizer (set by `load`) applies the chat template
    and decodes; every call before `load` is refused. `use_chat_template` replaces the model's template
    (RaasConfig.chat_template) in every rendering, whatever weights are loaded."""

    tokenizer: Any
    chat_template: str | None = None  # Jinja text that replaces the model's own (None: the model's)

    def use_chat_template(self, template: str | None) -> None:
        """Render chat with `template` instead of the model's own template, before and after any `load`
        (None: the model's). It goes to every `apply_chat_template` call rather than onto the tokenizer:
        vLLM's tokenizer renders in pooled copies of itself, which an attribute set on it does not reach."""
        self.chat_template = template

    def encode_chat(
        self,
        messages: Sequence[ChatMessage],
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[int]:
        self._require_model()
        return chat_token_ids(self.tokenizer, messages, add_generation_prompt, tools, self.chat_template)

    def decode(self, token_ids: Sequence[int]) -> str:
        self._require_model()
        return decode_text(self.tokenizer, token_ids)

    def _require_model(self) -> None:
        if self.tokenizer is None:  # `load` sets it with the weights
            raise RuntimeError("no weights loaded: call load(model_dir) first")


def read_config(model_dir: str) -> str | None:
    """The directory's config.json as canonical JSON (sorted keys), None when it is missing or unreadable:
    two loads with the same text have the same architecture, so weights can be reloaded in place."""
    try:
        with open(os.path.join(model_dir, "config.json")) as f:
            return json.dumps(json.load(f), sort_keys=True)
    except (OSError, ValueError):
        return None
