"""The vLLM engine: the `Engine` interface on vLLM's offline `LLM` API.

Logprobs: vLLM is started with `logprobs_mode="processed_logprobs"`, so the logprob it returns for
a sampled token is log softmax(processed logits)[token], where the processed logits are the model's
logits divided by the temperature (no penalties, no top-k/top-p: SamplingParams' defaults are kept
neutral). That is the tempered distribution the token was drawn from, the same contract as
`HFEngine`. (vLLM's default, "raw_logprobs", would return log softmax(logits) at T = 1.)

Weights: the first `load` starts vLLM on the directory; a later `load` of a directory with the same
`config.json` re-reads its safetensors in place (`collective_rpc("reload_weights")`) and drops the
prefix cache, which is how a weight-store pull (an atomic swap of the directory) reaches the engine.
A different architecture restarts vLLM.

LoRA (`lora_serving`): an adapter version is served as a LoRA adapter (`enable_lora`, one `LoRARequest` per
version) on the base weights, which stay loaded; vLLM starts with LoRA on when the config gives
`max_lora_rank`, else it restarts once, with LoRA on, at the first adapter version. Or, by default on CPU,
where vLLM's LoRA path samples 5-6x slower than the bare model, the adapter is merged into a copy of the base
beside the pulled adapter (`<adapter dir>-merged`) and that is reloaded in place like a full version.

vLLM starts worker processes: a script using this engine needs an `if __name__ == "__main__":` guard.
"""

from __future__ import annotations

import importlib
import logging
import os
import random
import shutil
import time
from collections.abc import Sequence
from typing import Any

from lakeflow.errors import ConfigError, MissingExtraError
from lakeflow.models.host import fastest_dtype
from lakeflow.models.merge import merge_adapter
from lakeflow.raas.config import VLLMEngineConfig
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

log = logging.getLogger(__name__)

_DEFAULT_MAX_LEN = 2048  # tokens, for a model whose config.json gives no max_position_embeddings

# Defaults for CPU runs on these machines; a caller's own setting wins. vLLM logs to stdout by default,
# which would mix its logs into `lakeflow raas`'s JSON summary: send them to stderr.
_ENV_DEFAULTS = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "VLLM_LOGGING_STREAM": "ext://sys.stderr",
}


def _import_vllm() -> Any:
    for key, value in _ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)
    try:
        return importlib.import_module("vllm")  # untyped (Any): vllm is not installed where mypy runs
    except ImportError as e:
        raise MissingExtraError("vllm", "vllm") from e


def engine_dtype(dtype: str | None, on_cpu: bool) -> str:
    """vLLM's dtype for the config's `dtype`: unset, float32 on CPU and the model's own ('auto') elsewhere;
    'fastest', on CPU bfloat16 where it has bf16 instructions and float32 where not."""
    if dtype is None:
        return "float32" if on_cpu else "auto"
    if dtype == "fastest":
        return fastest_dtype("cpu") if on_cpu else "auto"
    return dtype


class VLLMEngine(TokenizedEngine):
    """vLLM's `LLM`: float32 on CPU, the model's dtype elsewhere, unless the config names a dtype."""

    def __init__(self, config: VLLMEngineConfig | None = None, seed: int | None = None) -> None:
        self.vllm: Any = _import_vllm()
        self.config = config or VLLMEngineConfig()
        self.seed = seed if seed is not None else random.SystemRandom().randrange(1 << 31)
        self.llm: Any = None
        self.tokenizer: Any = None
        self.model_dir: str | None = None
        self.max_model_len = 0
        self._config_json: str | None = None
        self._state: str | None = None  # the state checksum of the base weights loaded (a pulled directory's)
        self._lora_rank: int | None = None  # the largest adapter rank vLLM was started for (None: LoRA off)
        self._lora: Any = None  # the LoRARequest every generation uses (None: the bare model)

    # --- weights ------------------------------------------------------------------------

    def load(self, model_dir: str) -> None:
        """Reload the directory's weights in place when the architecture is unchanged, else start vLLM."""
        self._start(model_dir, self.config.max_lora_rank)

    def load_adapter(self, base_dir: str, adapter_dir: str, adapter_id: int, rank: int) -> None:
        """Serve the PEFT adapter of `adapter_dir` on the model of `base_dir`: merged into a copy of it (see
        `lora_serving`), or as a LoRA adapter (`LoRARequest`), for which vLLM is (re)started with LoRA on only when
        it runs without it, with a smaller maximum rank, or on other base weights (vLLM reads the adapter at the
        first generation that uses it)."""
        if self._serves_merged():
            self._start(_merged_copy(base_dir, adapter_dir), None)
            return
        held = held_state(base_dir)
        if self.llm is None or self._lora_rank is None or rank > self._lora_rank or held is None or held != self._state:
            self._start(base_dir, max(rank, self.config.max_lora_rank or 0), restart=self._lora_rank is None)
        request = importlib.import_module("vllm.lora.request").LoRARequest
        self._lora = request(f"adapter-{adapter_id}", adapter_id, adapter_dir)
        self.model_dir = adapter_dir

    def _serves_merged(self) -> bool:
        """Whether adapters are served merged into the base: `lora_serving`, 'auto' meaning on CPU."""
        if self.config.lora_serving != "auto":
            return self.config.lora_serving == "merged"
        return bool(importlib.import_module("vllm.platforms").current_platform.is_cpu())

    def _start(self, model_dir: str, lora_rank: int | None, restart: bool = False) -> None:
        """Load `model_dir`: in place when vLLM runs on the same architecture with the LoRA setting asked for
        (and `restart` is not set), else (re)start vLLM on it. The adapter served until now is dropped."""
        config_json = read_config(model_dir)
        self._state, self._lora = held_state(model_dir), None
        same_lora = lora_rank is None or (self._lora_rank is not None and lora_rank <= self._lora_rank)
        if (
            self.llm is not None
            and not restart
            and same_lora
            and config_json is not None
            and config_json == self._config_json
        ):
            t0 = time.perf_counter()
            # reload_weights re-lists the directory's safetensors, so a directory swapped in at the same
            # path is read anew; `weights_path` also points vLLM at a new path when the caller moved.
            self.llm.collective_rpc("lakeflow_reload_weights", args=(model_dir,))
            self.llm.reset_prefix_cache()
            self.model_dir = model_dir
            log.info("vLLM reloaded weights from %s in %.3f s", model_dir, time.perf_counter() - t0)
            return
        self.close()
        t0 = time.perf_counter()
        platform = importlib.import_module("vllm.platforms").current_platform
        on_cpu = bool(platform.is_cpu())
        model_max = _max_positions(config_json)
        max_len = self.config.max_model_len or model_max or _DEFAULT_MAX_LEN
        if model_max and max_len > model_max:
            raise ConfigError(
                f"engine.max_model_len {max_len} exceeds the {model_max} positions of {model_dir} (config.json "
                "max_position_embeddings): lower it, or leave it out to use the model's"
            )
        kwargs: dict[str, Any] = {
            "model": model_dir,
            "max_model_len": max_len,
            "enforce_eager": self.config.enforce_eager,
            "dtype": engine_dtype(self.config.dtype, on_cpu),
            "seed": self.seed,
            "logprobs_mode": "processed_logprobs",
            "worker_extension_cls": f"{__name__}.WorkerExtension",
        }
        if not on_cpu:
            kwargs["gpu_memory_utilization"] = self.config.gpu_memory_utilization
        if lora_rank is not None:  # one adapter at a time: each version replaces the one before
            kwargs.update(enable_lora=True, max_lora_rank=_lora_rank_slot(lora_rank), max_loras=1)
        self.llm = self.vllm.LLM(**kwargs)
        self._lora_rank = _lora_rank_slot(lora_rank) if lora_rank is not None else None
        self.tokenizer = self.llm.get_tokenizer()
        self.model_dir, self._config_json, self.max_model_len = model_dir, config_json, max_len
        log.info("vLLM started on %s in %s in %.1f s", model_dir, kwargs["dtype"], time.perf_counter() - t0)

    def close(self) -> None:
        """Stop vLLM's engine core and its workers (also done at interpreter exit)."""
        if self.llm is None:
            return
        llm, self.llm = self.llm, None
        engine = getattr(llm, "llm_engine", None)
        core = getattr(engine, "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()

    # --- sampling -----------------------------------------------------------------------

    def generate(
        self, prompts: Sequence[Prompt], n: int, max_tokens: int, temperature: float
    ) -> list[list[Completion]]:
        check_sampling(n, max_tokens, temperature)
        self._require_model()
        all_ids = []
        for prompt in prompts:
            ids = [int(t) for t in prompt] if is_token_ids(prompt) else self.encode_chat(prompt)  # type: ignore[arg-type]
            if not ids:
                raise ValueError("empty prompt")
            if len(ids) + max_tokens > self.max_model_len:
                raise ValueError(f"prompt of {len(ids)} tokens + {max_tokens} new exceeds {self.max_model_len} tokens")
            all_ids.append(ids)
        if not all_ids:
            return []
        # top_k/top_p/min_p and penalties left neutral: the whole tempered distribution is sampled.
        greedy = temperature == 0  # vLLM decodes greedily once; the completion is copied n times below
        params = self.vllm.SamplingParams(
            n=1 if greedy else n, temperature=temperature, top_p=1.0, top_k=0, max_tokens=max_tokens, logprobs=0
        )
        outputs = self.llm.generate(
            [{"prompt_token_ids": ids} for ids in all_ids], params, use_tqdm=False, lora_request=self._lora
        )
        results = []
        for ids, out in zip(all_ids, outputs, strict=True):
            completions = []
            for c in out.outputs:
                tokens = [int(t) for t in c.token_ids]
                if c.logprobs is None or len(c.logprobs) != len(tokens):
                    raise RuntimeError(f"vLLM returned {len(c.logprobs or [])} logprobs for {len(tokens)} tokens")
                logprobs = [float(step[t].logprob) for step, t in zip(c.logprobs, tokens, strict=True)]
                if c.finish_reason not in ("stop", "length"):
                    raise RuntimeError(f"vLLM finished a completion with {c.finish_reason!r}")
                completions.append(Completion(list(ids), tokens, logprobs, c.finish_reason, self.decode(tokens)))
            results.append(completions * n if greedy else completions)
        return results

    def choice_logprobs(self, prompt_ids: Sequence[int], choices: Sequence[str]) -> list[float]:
        """log p(choice | prompt) of each choice, summed over its tokens: the prompt logprobs of the prompt
        followed by each choice (one token generated and dropped)."""
        self._require_model()
        rows = choice_rows(self.tokenizer, prompt_ids, choices, self.max_model_len - 1)
        start = len(prompt_ids)
        params = self.vllm.SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=0)
        outputs = self.llm.generate(
            [{"prompt_token_ids": r} for r in rows], params, use_tqdm=False, lora_request=self._lora
        )
        out = []
        for row, output in zip(rows, outputs, strict=True):
            steps = output.prompt_logprobs or []
            out.append(sum(float(steps[i][row[i]].logprob) for i in range(start, len(row))))
        return out

    def token_logprobs(
        self, rows: Sequence[tuple[Sequence[int], Sequence[int]]], temperature: float
    ) -> list[list[float]]:
        """Each response token's logprob given what precedes it: the prompt logprobs of prompt + response (one
        token generated and dropped). vLLM computes prompt logprobs from the raw logits: temperature 1 only."""
        self._require_model()
        if temperature != 1.0:
            raise ValueError(
                f"the vllm engine scores tokens at temperature 1 only (asked {temperature}): serve the teacher on "
                "the hf engine, or sample the student at temperature 1"
            )
        check_score_rows(rows, self.max_model_len - 1)
        seqs = [[int(t) for t in p] + [int(t) for t in r] for p, r in rows]
        params = self.vllm.SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=0)
        outputs = self.llm.generate([{"prompt_token_ids": s} for s in seqs], params, use_tqdm=False)
        out = []
        for (prompt, _), seq, output in zip(rows, seqs, outputs, strict=True):
            steps = output.prompt_logprobs or []
            out.append([float(steps[t][seq[t]].logprob) for t in range(len(prompt), len(seq))])
        return out


class WorkerExtension:
    """Methods vLLM mixes into its workers (`worker_extension_cls`); `self` is the worker."""

    def lakeflow_reload_weights(self, weights_path: str) -> None:
        """`reload_weights`, then re-tie a tied LM head to the reloaded embedding.

        vLLM 0.32's layer-wise reload replaces `embed_tokens.weight` with a new tensor and puts the old
        one back under `lm_head` ("ParallelLMHead: Failed to load weights": the checkpoint has no
        `lm_head.weight`), so without this a tied model would sample with the stale output projection.
        Re-running the head's weight processing rebuilds its CPU GEMM (packed weights / oneDNN handle).
        """
        worker: Any = self
        worker.reload_weights(weights_path=weights_path)
        runner = worker.model_runner
        text_config = runner.model_config.hf_text_config
        if not getattr(text_config, "tie_word_embeddings", False):
            return
        model = runner.get_model()
        head = getattr(model, "lm_head", None)
        embed = getattr(getattr(model, "model", None), "embed_tokens", None)
        if head is None or embed is None or not hasattr(head, "weight"):
            raise RuntimeError(f"cannot re-tie the LM head of {type(model).__name__} after a weight reload")
        head.weight = embed.weight
        method = getattr(head, "quant_method", None)
        if method is not None:
            method.process_weights_after_loading(head)


def _merged_copy(base_dir: str, adapter_dir: str) -> str:
    """The base model with the adapter merged in, written beside the adapter as `<adapter_dir>-merged` (replacing
    the copy of the version before, through a temporary directory) with the base's own config.json, so that the
    engine reloads it in place; returns its path."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # a bar in the service's log per version otherwise
    t0 = time.perf_counter()
    merged = adapter_dir.rstrip("/") + "-merged"
    partial = merged + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    merge_adapter(base_dir, adapter_dir, partial)
    shutil.copyfile(os.path.join(base_dir, "config.json"), os.path.join(partial, "config.json"))
    shutil.rmtree(merged, ignore_errors=True)
    os.rename(partial, merged)
    log.info("merged the adapter %s into its base in %.1f s", adapter_dir, time.perf_counter() - t0)
    return merged


def _lora_rank_slot(rank: int) -> int:
    """The `max_lora_rank` vLLM accepts for adapters of `rank`: the smallest of its allowed values that holds it."""
    for allowed in (1, 8, 16, 32, 64, 128, 256, 320, 512):
        if rank <= allowed:
            return allowed
    raise ConfigError(f"LoRA rank {rank} exceeds vLLM's largest max_lora_rank, 512: lower lora.rank")


def _max_positions(config_json: str | None) -> int | None:
    import json

    if config_json is None:
        return None
    value = json.loads(config_json).get("max_position_embeddings")
    return int(value) if isinstance(value, int) and value > 0 else None
