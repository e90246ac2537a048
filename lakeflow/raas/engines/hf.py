"""`HFEngine`: the `Engine` interface on transformers `generate`, on one device (float32 on CPU by default).
A LoRA adapter version is served through peft on the base model (`load_adapter`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from lakeflow.errors import MissingExtraError
from lakeflow.models.host import fastest_dtype
from lakeflow.raas.config import HFEngineConfig
from lakeflow.raas.engines.base import (
    Completion,
    Prompt,
    TokenizedEngine,
    check_sampling,
    check_score_rows,
    choice_rows,
    is_token_ids,
    read_config,
)
from lakeflow.raas.engines.versions import held_state
from lakeflow.weights.pull import ADAPTER_FILE

ADAPTER_CONFIG = "adapter_config.json"

SCORE_ROWS = 16  # rows of one scoring forward (`token_logprobs`)


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
        self._state: str | None = None  # the state checksum of the full weights loaded (a pulled directory's)
        self._adapter_config: bytes | None = None  # adapter_config.json of the adapter served (peft), if any

    # --- weights ------------------------------------------------------------------------

    def load(self, model_dir: str) -> None:
        """Reload tensors in place when the architecture is unchanged, else build the model anew."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        config_json = read_config(model_dir)
        self._state = held_state(model_dir)
        if self._adapter_config is not None:  # back to the bare model: the adapter's layers removed, not merged
            self.model, self._adapter_config = self.model.unload(), None
        same_architecture = self.model is not None and config_json is not None and config_json == self._config_json
        if same_architecture and self._load_in_place(model_dir):
            self.model_dir = model_dir
            return
        dtype = fastest_dtype(self.config.device) if self.config.dtype == "fastest" else self.config.dtype
        model: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
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

    def load_adapter(self, base_dir: str, adapter_dir: str, adapter_id: int, rank: int) -> None:
        """Serve the PEFT adapter of `adapter_dir` on the model of `base_dir` through peft (its layers compute
        base + scale * B @ A; the base weights stay as they are); a later adapter of the same settings is
        copied into the same layers."""
        if self.model is None or held_state(base_dir) is None or held_state(base_dir) != self._state:
            self.load(base_dir)
        with open(os.path.join(adapter_dir, ADAPTER_CONFIG), "rb") as f:
            adapter_config = f.read()
        if self._adapter_config is not None and adapter_config != self._adapter_config:
            self.model, self._adapter_config = self.model.unload(), None
        try:
            from peft import PeftModel, set_peft_model_state_dict
        except ImportError as e:
            raise MissingExtraError("peft", "raas") from e
        if self._adapter_config is None:
            self.model = PeftModel.from_pretrained(self.model, adapter_dir, is_trainable=False).eval()
            self._adapter_config = adapter_config
        else:
            from safetensors.torch import load_file

            set_peft_model_state_dict(self.model, load_file(os.path.join(adapter_dir, ADAPTER_FILE)))
        self.model_dir = adapter_dir

    # --- sampling -----------------------------------------------------------------------

    def generate(
        self, prompts: Sequence[Prompt], n: int, max_tokens: int, temperature: float
    ) -> list[list[Completion]]:
        check_sampling(n, max_tokens, temperature)
        self._require_model()
        return [self._generate_one(prompt, n, max_tokens, temperature) for prompt in prompts]

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

    def token_logprobs(
        self, rows: Sequence[tuple[Sequence[int], Sequence[int]]], temperature: float
    ) -> list[list[float]]:
        """Each response token's logprob given what precedes it, at `temperature`: one forward per
        SCORE_ROWS rows, padded on the right (a causal model's earlier positions ignore the padding); the
        chunks bound the memory of the [rows, width, vocab] logits."""
        import torch

        self._require_model()
        if not temperature > 0:
            raise ValueError(f"temperature {temperature} must be above 0 to score tokens")
        check_score_rows(rows, self.max_model_len)
        out: list[list[float]] = []
        pad = self.tokenizer.pad_token_id or 0
        for at in range(0, len(rows), SCORE_ROWS):
            chunk = rows[at : at + SCORE_ROWS]
            seqs = [[int(t) for t in p] + [int(t) for t in r] for p, r in chunk]
            width = max(len(s) for s in seqs)
            x = torch.tensor([s + [pad] * (width - len(s)) for s in seqs], device=self.config.device)
            mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs], device=self.config.device)
            with torch.inference_mode():
                logits = self.model(input_ids=x, attention_mask=mask).logits[:, :-1].float() / temperature
                logp = torch.log_softmax(logits, dim=-1).gather(-1, x[:, 1:, None]).squeeze(-1)
            # logp[i, t] scores token t + 1 of row i; a response starts at token len(prompt)
            out += [logp[i, len(p) - 1 : len(p) - 1 + len(r)].tolist() for i, (p, r) in enumerate(chunk)]
        return out

    def choice_logprobs(self, prompt_ids: Sequence[int], choices: Sequence[str]) -> list[float]:
        """log p(choice | prompt) of each choice, summed over its tokens: one forward over the prompt followed
        by each choice (a batch padded on the right; a causal model's earlier positions ignore the padding)."""
        import torch

        self._require_model()
        rows = choice_rows(self.tokenizer, prompt_ids, choices, self.max_model_len)
        width, start = max(len(r) for r in rows), len(prompt_ids)
        pad = self.tokenizer.pad_token_id or 0
        x = torch.tensor([r + [pad] * (width - len(r)) for r in rows], device=self.config.device)
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], device=self.config.device)
        with torch.inference_mode():
            logits = self.model(input_ids=x, attention_mask=mask).logits.float()  # (choices, width, vocab)
            logp = torch.log_softmax(logits, dim=-1)
        out = []
        for i, row in enumerate(rows):
            steps = torch.arange(start - 1, len(row) - 1, device=logp.device)  # position t predicts token t + 1
            tokens = torch.tensor(row[start:], device=logp.device)
            out.append(float(logp[i, steps, tokens].sum()))
        return out
