"""LoRA in the trainer: the frozen base wrapped by peft, the adapter's tensors and files as published, the checks.

A LoRA trainer publishes the base model once (version 0, full) and then each version's adapter alone: its
tensors under PEFT's names (`base_model.model.<module>.lora_A.weight`, as `save_pretrained` writes them) and
`adapter_config.json`, so a pulled adapter version is a directory PEFT and vLLM load as it is.
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch

from lakeflow.errors import ConfigError, MissingExtraError
from lakeflow.trainer.config import LoraConfig
from lakeflow.weights import AdapterInfo

ADAPTER_CONFIG = "adapter_config.json"
BASE_VERSION = 0  # the full version every adapter of a model applies to


def linear_names(model: torch.nn.Module) -> list[str]:
    """The last name part of every Linear module (q_proj, up_proj, lm_head, …): what `targets` may name."""
    return sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)})


def target_problem(model: torch.nn.Module, targets: list[str]) -> str | None:
    """Why `targets` cannot be wrapped in `model` (a name that matches no Linear module), or None."""
    linear = [name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    missing = [t for t in targets if not any(n == t or n.endswith("." + t) for n in linear)]
    if not missing:
        return None
    return (
        f"lora.targets: {', '.join(missing)} matches no Linear module of {type(model).__name__}; "
        f"its Linear modules are: {', '.join(linear_names(model))}"
    )


def peft_config(config: LoraConfig) -> Any:
    """peft's LoraConfig for the trainer's `lora` section."""
    try:
        from peft import LoraConfig as PeftLoraConfig
    except ImportError as e:
        raise MissingExtraError("peft", "train") from e
    return PeftLoraConfig(
        r=config.rank,
        lora_alpha=config.alpha,  # type: ignore[arg-type]  # annotated int; peft scales by alpha / r as a float
        target_modules=list(config.targets),
        lora_dropout=config.dropout,
        bias="none",
    )


def attach(model: torch.nn.Module, config: LoraConfig) -> Any:
    """`model` wrapped by peft with a fresh adapter (B = 0: the wrapped model computes as the base does); only
    the adapter's parameters require gradients. ConfigError naming the model's modules for a bad target."""
    problem = target_problem(model, config.targets)
    if problem is not None:
        raise ConfigError(problem)
    from peft import get_peft_model

    wrapped = get_peft_model(model, peft_config(config))  # type: ignore[arg-type]
    wrapped.train()
    return wrapped


def adapter_tensors(model: Any) -> dict[str, torch.Tensor]:
    """The adapter's tensors under the names PEFT saves them by (the live tensors, not copies)."""
    from peft import get_peft_model_state_dict

    return dict(get_peft_model_state_dict(model))  # type: ignore[no-untyped-call]


def trainable_tensors(model: Any) -> dict[str, torch.Tensor]:
    """The parameters the optimizer updates, by their names in the wrapped model (a checkpoint's master weights)."""
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


def adapter_files(config: LoraConfig) -> dict[str, bytes]:
    """`adapter_config.json`, the same bytes for the same settings (so every version of a run shares one)."""
    fields = peft_config(config).to_dict()
    fields.update(base_model_name_or_path=None, inference_mode=True, revision=None)
    text = json.dumps(fields, indent=2, sort_keys=True, default=lambda v: sorted(v) if isinstance(v, set) else str(v))
    return {ADAPTER_CONFIG: (text + "\n").encode()}


def adapter_info(config: LoraConfig) -> AdapterInfo:
    """What the manifests of this trainer's adapter versions record."""
    return AdapterInfo(
        rank=config.rank,
        alpha=config.alpha,
        targets=list(config.targets),
        dropout=config.dropout,
        base_version=BASE_VERSION,
    )


def settings_problem(published: AdapterInfo | None, config: LoraConfig | None, version: int) -> str | None:
    """Why a trainer with `config` cannot continue published `version` (whose manifest's adapter is `published`)."""
    if version == BASE_VERSION:
        return None
    if published is None and config is not None:
        return (
            f"lora: version {version} is full fine-tuned weights, not an adapter: LoRA trains on version 0 only "
            "(train a new model id, or leave lora out)"
        )
    if published is not None and config is None:
        return f"version {version} is a LoRA adapter: set the trainer's `lora` section as it was published"
    if published is not None and config is not None:
        wanted = adapter_info(config)
        if (published.rank, published.alpha, published.targets) != (wanted.rank, wanted.alpha, wanted.targets):
            return (
                f"lora: version {version} is an adapter of rank {published.rank}, alpha {published.alpha}, targets "
                f"{published.targets}; the config says rank {wanted.rank}, alpha {wanted.alpha}, targets "
                f"{wanted.targets} (keep the published settings, or train a new model id)"
            )
    return None


def load_adapter(model: Any, directory: str) -> None:
    """The adapter tensors of a pulled adapter version into the wrapped model."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    from lakeflow.weights.tensors import SINGLE_FILE

    state = load_file(os.path.join(directory, SINGLE_FILE))
    result: Any = set_peft_model_state_dict(model, state)  # type: ignore[func-returns-value]  # (annotated None)
    missing = [k for k in result.missing_keys if "lora_" in k]
    if missing or result.unexpected_keys:
        raise ConfigError(
            f"the adapter in {directory} does not fit the model: {len(missing)} adapter tensors missing, "
            f"{len(result.unexpected_keys)} unexpected (were the lora settings changed?)"
        )
