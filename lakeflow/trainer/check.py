"""The check of a trainer config before `lakeflow train` starts: a `type: function` loss resolves and takes
its params; a warm-up's demonstrations read. Shipped names are checked against their typed configs, so the
check imports no torch.
`check_trainer_here` looks for what this machine must have: the model's files and the device, and that LoRA
targets name modules of the model (read from its files' headers)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import TypeAdapter, ValidationError

from lakeflow.errors import ConfigError, PluginError
from lakeflow.models.chat import template_setting_problem
from lakeflow.models.check import device_problem, model_problem
from lakeflow.models.info import read_matrix_modules
from lakeflow.plugins import call_problem, resolve
from lakeflow.trainer.config import SHIPPED_LOSSES, FunctionLoss, LossConfig, TrainerConfig
from lakeflow.trainer.demos import read_conversations

_LOSS: TypeAdapter[Any] = TypeAdapter(LossConfig)


def resolve_loss(config: FunctionLoss, shipped: Mapping[str, Any], key: str = "loss.function") -> Callable[..., Any]:
    """The function a `type: function` loss names (in `shipped`, by import path or entry point), checked to take
    (inputs, **params); PluginError naming `key`."""
    params = dict(config.params)
    what = f"function(inputs{''.join(', ' + k for k in params)})"
    fn: Callable[..., Any] = resolve(
        "loss", config.function, shipped, key=key, check=lambda f: call_problem(f, None, what=what, **params)
    )
    return fn


def check_trainer_config(config: TrainerConfig, key: str = "") -> list[str]:
    """Problems of `config` (empty: it can start), each one line beginning with its key under `key`."""
    prefix = f"{key}." if key else ""
    return loss_problems(config, prefix) + warmup_problems(config, prefix)


def warmup_problems(config: TrainerConfig, prefix: str) -> list[str]:
    """A warm-up whose demonstrations cannot be read or whose chat template names nothing usable."""
    warmup = config.warmup
    if warmup is None:
        return []
    problems = []
    try:
        read_conversations(warmup.data)
    except ConfigError as e:
        problems.append(f"{prefix}{e}")
    if warmup.chat_template is not None and (problem := template_setting_problem(warmup.chat_template)):
        problems.append(f"{prefix}warmup.chat_template: {problem}")
    return problems


def loss_problems(config: TrainerConfig, prefix: str) -> list[str]:
    """A `type: function` loss that does not resolve or take its params."""
    loss = config.loss
    if not isinstance(loss, FunctionLoss):
        return []
    if loss.function in SHIPPED_LOSSES:
        try:
            _LOSS.validate_python({"type": loss.function, **loss.params})
        except ValidationError as e:
            bad = "; ".join(f"{'.'.join(str(p) for p in err['loc'][1:])}: {err['msg']}" for err in e.errors())
            return [f"{prefix}loss.params: {bad}"]
        return []
    try:  # the user's loss module is imported here (and torch with it, if it imports torch)
        resolve_loss(loss, dict.fromkeys(SHIPPED_LOSSES), key=f"{prefix}loss.function")
    except PluginError as e:
        return [str(e)]
    return []


def check_trainer_here(config: TrainerConfig, key: str = "") -> list[str]:
    """What this machine lacks for `config` (empty: nothing): the model (a directory, the Hugging Face cache or
    a hub that answers) and the device. torch is imported only for a device other than the CPU."""
    prefix = f"{key}." if key else ""
    problems = []
    if (problem := model_problem(config.model)) is not None:
        problems.append(f"{prefix}model: {problem}")
    if (problem := device_problem(config.device)) is not None:
        problems.append(f"{prefix}device: {problem}")
    return problems + lora_target_problems(config, prefix)


def lora_target_problems(config: TrainerConfig, prefix: str) -> list[str]:
    """LoRA `targets` that name no module of the model, where its files are here (read from their headers)."""
    if config.lora is None or (modules := read_matrix_modules(config.model)) is None:
        return []
    missing = [t for t in config.lora.targets if t.rsplit(".", 1)[-1] not in modules]
    if not missing:
        return []
    return [
        f"{prefix}lora.targets: {', '.join(missing)} is no module of {config.model}; its Linear modules are: "
        f"{', '.join(modules)}"
    ]
