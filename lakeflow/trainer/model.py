"""The trainer's torch side: load a causal LM, score tokens, and turn parameters into a weight-store State.

Conversion to `State` is bit-exact: each tensor's bytes are reinterpreted as unsigned integers
(bf16 has no numpy dtype), never converted through float arithmetic, and copied, so a state
taken before an optimizer step is not changed by it.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from lakeflow.errors import ConfigError, MissingExtraError, WeightsFormatError
from lakeflow.models.host import fastest_autocast
from lakeflow.trainer.config import TrainerConfig, publish_dtype_for
from lakeflow.weights import State, raw_tensor
from lakeflow.weights.publish import read_side_files

_STORED = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}  # safetensors' names
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_SAFETENSORS = {
    torch.float32: ("F32", torch.uint32),
    torch.bfloat16: ("BF16", torch.uint16),
    torch.float16: ("F16", torch.uint16),
}


def load_model(path: str, dtype: str) -> Any:
    """A causal LM from a local Hugging Face directory or a hub id, in `dtype`, in train mode."""
    try:
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging
    except ImportError as e:
        raise MissingExtraError("transformers", "train") from e
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # one bar per load on stderr otherwise
    model = AutoModelForCausalLM.from_pretrained(path, dtype=TORCH_DTYPES[dtype])
    model.train()
    return model


def checkpoint_activations(model: Any, enabled: bool = True) -> None:
    """Recompute each decoder layer's activations in the backward pass instead of keeping them from the
    forward (Hugging Face gradient checkpointing, non-reentrant): less memory, one more forward's compute."""
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise ConfigError(
            f"activation_checkpointing: {type(model).__name__} does not support gradient checkpointing; set it false"
        )
    if enabled:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_disable()


def side_files(path: str) -> dict[str, bytes]:
    """Config, tokenizer and other non-weight files to publish with version 0.

    A local directory ships its files as they are; for a hub id the config and tokenizer are
    written out by transformers.
    """
    if os.path.isdir(path):
        return read_side_files(path)
    import tempfile

    from transformers import AutoConfig, AutoTokenizer

    with tempfile.TemporaryDirectory(prefix="lakeflow-side-") as tmp:
        AutoConfig.from_pretrained(path).save_pretrained(tmp)
        AutoTokenizer.from_pretrained(path).save_pretrained(tmp)
        return read_side_files(tmp)


def config_dtype(files: Mapping[str, bytes]) -> str | None:
    """The dtype a model's `config.json` (among its side files) names, when it is one the trainer publishes:
    `dtype` (transformers 5) or `torch_dtype` (earlier)."""
    try:
        config = json.loads(files.get("config.json", b"{}"))
    except ValueError:
        return None
    found = config.get("dtype") or config.get("torch_dtype") if isinstance(config, dict) else None
    return found if found in TORCH_DTYPES else None


def labelled(files: Mapping[str, bytes], dtype: str) -> dict[str, bytes]:
    """The side files with `config.json` naming `dtype`, the dtype of the tensors published beside it (a
    serving engine's `dtype: auto` reads it)."""
    out = dict(files)
    if "config.json" in out:
        config = json.loads(out["config.json"])
        config.pop("torch_dtype", None)
        config["dtype"] = dtype
        out["config.json"] = (json.dumps(config, indent=2, sort_keys=True) + "\n").encode()
    return out


def published_dtype(directory: str, config: TrainerConfig) -> str:
    """The dtype of a pulled version's floating-point tensors (what every later version is published in);
    ConfigError when the config's `publish_dtype` names another."""
    from safetensors import safe_open

    found = None
    for name in sorted(os.listdir(directory)):
        if name.endswith(".safetensors") and found is None:
            with safe_open(os.path.join(directory, name), "pt") as f:
                kinds = {f.get_slice(k).get_dtype() for k in f.keys()}  # noqa: SIM118  (not a dict)
            found = next((d for code, d in _STORED.items() if code in kinds), None)
    found = found or config.dtype
    wanted = publish_dtype_for(config, None) if config.publish_dtype is not None else found
    if wanted != found:
        named = config.publish_dtype if wanted == config.publish_dtype else f"{config.publish_dtype} ({wanted} here)"
        raise ConfigError(
            f"publish_dtype: {named} differs from the published versions' {found}; every version of a model has "
            "one dtype (leave publish_dtype out, or train a new model id)"
        )
    return found


def published_tensors(tensors: Mapping[str, torch.Tensor], dtype: str) -> dict[str, torch.Tensor]:
    """The tensors as published: floating-point ones in `dtype` (a copy where the master weights differ)."""
    target = TORCH_DTYPES[dtype]
    return {n: t.detach().to(target) if t.is_floating_point() else t for n, t in tensors.items()}


def to_state(model: torch.nn.Module | Mapping[str, torch.Tensor], into: State | None = None) -> State:
    """Parameters and buffers that a checkpoint stores, as raw bits (copied).

    `model` may also be its tensors by name (as `distributed.full_tensors` gathers them). Tied
    tensors (an LM head sharing the embedding) appear once, under the first name in
    `state_dict` order, as `save_pretrained` writes them. `into`, a state of the same model
    no longer in use, is overwritten and returned: copying into memory already touched runs
    at memcpy speed (~11 GB/s here) where fresh arrays fault their pages in (~0.5 GB/s).
    """
    state: State = {}
    seen: set[int] = set()
    tensors = model.state_dict() if isinstance(model, torch.nn.Module) else model
    for name, tensor in tensors.items():
        t = tensor.detach()
        if t.data_ptr() in seen:
            continue
        seen.add(t.data_ptr())
        if t.dtype not in _SAFETENSORS:
            raise WeightsFormatError(
                f"tensor {name} has dtype {t.dtype}; the trainer publishes float32, bfloat16 or float16: "
                "set the trainer's `dtype`, or convert the model (`lakeflow models convert --dtype`)"
            )
        dtype, view = _SAFETENSORS[t.dtype]
        source = t.contiguous().cpu().view(view).numpy().reshape(-1)
        old = into.get(name) if into is not None else None
        if old is not None and old.dtype == dtype and old.shape == tuple(t.shape):
            np.copyto(old.bits, source)
            state[name] = old
        else:
            state[name] = raw_tensor(dtype, tuple(t.shape), source.copy())
    return state


def token_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
    start: int = 1,
) -> torch.Tensor:
    """[B, T] float32: position t holds log p(input_ids[t] | input_ids[:t]) under the policy at
    `temperature` (logits / T, as the rollout service sampled) for t >= `start`; positions before
    `start` hold 0 (their logits are never computed: `start` is the first response token)."""
    logits = _next_token_logits(model, input_ids, attention_mask, temperature, start)
    return _left_padded(_scored(logits, input_ids[:, start:]), start)


def token_logprobs_entropy(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
    start: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`token_logprobs` and, from the same logits, [B, T] float32 entropy in nats of the tempered
    distribution each token was drawn from: position t >= `start` holds H(softmax(logits[t - 1] / T)),
    earlier positions hold 0. The entropy carries no gradient (a diagnostic)."""
    logits = _next_token_logits(model, input_ids, attention_mask, temperature, start)
    with torch.no_grad():
        shifted = logits.detach()
        entropy = torch.logsumexp(shifted, dim=-1) - (torch.softmax(shifted, dim=-1) * shifted).sum(-1)
    return _left_padded(_scored(logits, input_ids[:, start:]), start), _left_padded(entropy, start)


def compute_precision(device: str, autocast: str | None) -> contextlib.AbstractContextManager[Any]:
    """The forward passes' precision: torch autocast to `autocast` (bfloat16/float16; `fastest`: bfloat16
    where `device` computes it natively) on `device`'s kind, or full precision (None). The weights and the
    optimizer stay in the trainer's `dtype` either way."""
    if autocast == "fastest":
        autocast = fastest_autocast(device)
    if autocast is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=TORCH_DTYPES[autocast])


def first_scored(mask: torch.Tensor) -> int:
    """The first position any row of [B, T] `mask` scores (>= 1: position 0 has no prediction)."""
    columns = torch.nonzero(mask.detach().any(dim=0))
    return max(int(columns[0]), 1) if columns.numel() else 1


def _next_token_logits(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float, start: int
) -> torch.Tensor:
    """[B, T - start, V] float32 logits / T of the predictions of tokens start … T-1 (from positions
    start-1 … T-2). A model whose forward takes `logits_to_keep` (Hugging Face causal LMs) computes only
    those; others compute all and are sliced. No key/value cache is built (`use_cache=False`, where the
    forward takes it): a training pass never reads one."""
    t = input_ids.shape[1]
    takes = inspect.signature(model.forward).parameters
    options: dict[str, Any] = {"use_cache": False} if "use_cache" in takes else {}
    out: torch.Tensor
    if "logits_to_keep" in takes:
        out = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=t - start + 1, **options).logits
    else:
        out = model(input_ids=input_ids, attention_mask=attention_mask, **options).logits[:, start - 1 :]
    return out[:, :-1].float() / temperature


def _scored(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    b, n, v = logits.shape
    return -F.cross_entropy(logits.reshape(-1, v), targets.reshape(-1), reduction="none").view(b, n)


def _left_padded(values: torch.Tensor, start: int) -> torch.Tensor:
    return torch.cat([values.new_zeros(values.shape[0], start), values], dim=1)
