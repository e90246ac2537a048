"""Inference engines behind one small interface: n sampled completions with behaviour logprobs.

`Engine` is what workflows call; `ENGINES` maps a config `type` to a factory and
`build_engine` builds one. Logprobs are those of the *tempered* sampling distribution,
log softmax(logits / T)[token], with no top-k/top-p truncation: exactly the distribution the
tokens were drawn from, so a trainer that divides its logits by the same T (stamped on every
sample as `extra.temperature`) gets the importance ratio pi_theta / pi_behaviour right.
`HFEngine` (transformers) is here; `VLLMEngine` (vllm_engine.py) is the same interface on
vLLM's offline API, imported only when chosen (`pip install 'lakeflow[vllm]'`).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from lakeflow.errors import MissingExtraError, PluginError
from lakeflow.plugins import call_problem, resolve
from lakeflow.raas.config import EngineConfig, FactoryEngineConfig, HFEngineConfig, VLLMEngineConfig

log = logging.getLogger(__name__)

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


def is_token_ids(prompt: Prompt) -> bool:
    return all(isinstance(t, int) for t in prompt)


def chat_token_ids(
    tokenizer: Any,
    messages: Sequence[ChatMessage],
    add_generation_prompt: bool = True,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> list[int]:
    """Token ids of chat messages through the tokenizer's chat template (shared by every engine); `tools`
    (function schemas) go to the template's `tools=`, so the model sees them in its own format."""
    ids = tokenizer.apply_chat_template(
        [dict(m) for m in messages],
        add_generation_prompt=add_generation_prompt,
        tools=[dict(t) for t in tools] if tools else None,
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
    and decodes; every call before `load` is refused."""

    tokenizer: Any

    def encode_chat(
        self,
        messages: Sequence[ChatMessage],
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[int]:
        self._require_model()
        return chat_token_ids(self.tokenizer, messages, add_generation_prompt, tools)

    def decode(self, token_ids: Sequence[int]) -> str:
        self._require_model()
        return decode_text(self.tokenizer, token_ids)

    def _require_model(self) -> None:
        if self.tokenizer is None:  # `load` sets it with the weights
            raise RuntimeError("no weights loaded: call load(model_dir) first")


class HFEngine(TokenizedEngine):
    """transformers `generate` on one device: float32 on CPU by default."""

    def __init__(self, config: HFEngineConfig | None = None, seed: int | None = None) -> None:
        try:
            import torch
            import transformers  # noqa: F401
        except ImportError as e:
            raise MissingExtraError("torch and transformers", "raas") from e
        self.config = config or HFEngineConfig()
        if self.config.threads:
            torch.set_num_threads(self.config.threads)
        if seed is not None:
            torch.manual_seed(seed)
        self.model: Any = None
        self.tokenizer: Any = None
        self.model_dir: str | None = None
        self.max_model_len = 0
        self._config_json: str | None = None
        self._stop_ids: set[int] = set()

    # --- weights ------------------------------------------------------------------------

    def load(self, model_dir: str) -> None:
        """Reload tensors in place when the architecture is unchanged, else build the model anew."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        config_json = _read_config(model_dir)
        same_architecture = self.model is not None and config_json is not None and config_json == self._config_json
        if same_architecture and self._load_in_place(model_dir):
            self.model_dir = model_dir
            return
        model: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, self.config.dtype))
        model = model.to(self.config.device).eval()
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model, self.tokenizer, self.model_dir, self._config_json = model, tokenizer, model_dir, config_json
        self.max_model_len = int(getattr(model.config, "max_position_embeddings", 0) or 1 << 30)
        eos = model.generation_config.eos_token_id
        stop = {eos} if isinstance(eos, int) else set(eos or [])
        if tokenizer.eos_token_id is not None:
            stop.add(tokenizer.eos_token_id)
        self._stop_ids = stop

    def _load_in_place(self, model_dir: str) -> bool:
        """Copy every tensor of the directory's safetensors into the live model; False if they do not fit."""
        import torch
        from safetensors.torch import load_file

        files = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
        state: dict[str, torch.Tensor] = {}
        for name in files:
            state.update(load_file(os.path.join(model_dir, name)))
        params = dict(self.model.state_dict())
        if not state or set(state) - set(params):
            return False
        loaded_ptrs = {params[k].data_ptr() for k in state}
        if any(params[k].data_ptr() not in loaded_ptrs for k in set(params) - set(state)):
            return False  # a tensor the files do not hold and that is not tied to one they do
        if any(params[k].shape != v.shape for k, v in state.items()):
            return False
        with torch.no_grad():
            for key, value in state.items():
                params[key].copy_(value)
        return True

    # --- sampling -----------------------------------------------------------------------

    def generate(
        self, prompts: Sequence[Prompt], n: int, max_tokens: int, temperature: float
    ) -> list[list[Completion]]:
        check_sampling(n, max_tokens, temperature)
        self._require_model()
        out = []
        for prompt in prompts:
            completions = self._generate_one(prompt, n, max_tokens, temperature)
            if self.config.pace_s_per_token:  # benchmarks: an accelerator's latency per decoding step
                time.sleep(self.config.pace_s_per_token * max(len(c.token_ids) for c in completions))
            out.append(completions)
        return out

    def _generate_one(self, prompt: Prompt, n: int, max_tokens: int, temperature: float) -> list[Completion]:
        import torch
        from transformers import GenerationConfig

        ids = [int(t) for t in prompt] if is_token_ids(prompt) else self.encode_chat(prompt)  # type: ignore[arg-type]
        if not ids:
            raise ValueError("empty prompt")
        if len(ids) + max_tokens > self.max_model_len:
            raise ValueError(f"prompt of {len(ids)} tokens + {max_tokens} new exceeds {self.max_model_len} tokens")
        x = torch.tensor([ids], device=self.config.device)
        # top_k=0, top_p=1: sample from the whole tempered distribution, the one the logprobs describe.
        greedy = temperature == 0
        gen = GenerationConfig(  # type: ignore[no-untyped-call]
            do_sample=not greedy,
            temperature=None if greedy else temperature,
            top_k=0,
            top_p=1.0,
            max_new_tokens=max_tokens,
            num_return_sequences=1 if greedy else n,  # greedy: one decode, copied n times below
            output_logits=True,
            return_dict_in_generate=True,
            eos_token_id=sorted(self._stop_ids) or None,
            pad_token_id=self.tokenizer.pad_token_id,
        )
        with torch.inference_mode():
            out = self.model.generate(input_ids=x, attention_mask=torch.ones_like(x), generation_config=gen)
            new = out.sequences[:, len(ids) :]  # (n, steps)
            logits = torch.stack(out.logits, dim=1).float()  # (n, steps, vocab): raw, before any processor
            scaled = logits if greedy else logits / temperature
            logprobs = torch.log_softmax(scaled, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        completions = []
        for row, lp in zip(new.tolist(), logprobs.tolist(), strict=True):
            end = next((i + 1 for i, t in enumerate(row) if t in self._stop_ids), None)
            tokens, reason = (row[:end], "stop") if end is not None else (row, "length")
            completions.append(
                Completion(list(ids), tokens, lp[: len(tokens)], reason, self.decode(tokens))  # type: ignore[arg-type]
            )
        return completions * n if greedy else completions


def _read_config(model_dir: str) -> str | None:
    try:
        with open(os.path.join(model_dir, "config.json")) as f:
            return json.dumps(json.load(f), sort_keys=True)
    except (OSError, ValueError):
        return None


def _vllm_engine(config: VLLMEngineConfig, seed: int | None) -> Engine:
    from lakeflow.raas.vllm_engine import VLLMEngine  # imports vllm lazily; MissingExtraError without it

    return VLLMEngine(config, seed)


def _hf_engine(config: HFEngineConfig, seed: int | None) -> Engine:
    return HFEngine(config, seed)


ENGINES: dict[str, Callable[[Any, int | None], Engine]] = {"hf": _hf_engine, "vllm": _vllm_engine}


def engine_factory(config: FactoryEngineConfig, key: str = "engine.factory") -> Callable[..., Engine]:
    """The factory a `type: factory` engine names, checked to take `seed` and the options; PluginError naming `key`."""
    if config.factory in ENGINES:
        raise PluginError(f"{key}: engine {config.factory!r} is shipped: give it as `type: {config.factory}`")
    options = dict(config.options)
    what = f"factory(seed, {', '.join(options)})" if options else "factory(seed)"
    return resolve(
        "engine", config.factory, {}, key=key, check=lambda f: call_problem(f, seed=None, what=what, **options)
    )


def build_engine(config: EngineConfig, seed: int | None = None) -> Engine:
    """The engine `config` describes (a shipped `type`, or a user's factory), without weights (call `load`)."""
    if isinstance(config, FactoryEngineConfig):
        engine = engine_factory(config)(seed=seed, **config.options)
        missing = [m for m in ("load", "encode_chat", "decode", "generate") if not callable(getattr(engine, m, None))]
        if not isinstance(getattr(engine, "max_model_len", None), int):
            missing.append("an int max_model_len")
        if missing:
            what = type(engine).__name__
            raise PluginError(
                f"engine.factory: {config.factory!r} built a {what}, not an Engine: it lacks {', '.join(missing)}"
            )
        return engine
    try:
        factory = ENGINES[config.type]
    except KeyError as e:
        raise ValueError(f"unknown engine {config.type!r}; known: {', '.join(sorted(ENGINES))}") from e
    return factory(config, seed)
