"""What this machine must have before a process loads a model: its files and the device it runs on.

`model_problem` says why a reference cannot be loaded here (a path that does not exist, a hub id that is
neither cached nor reachable), asking the hub at most once with a short timeout (never when it is offline).
`device_problem` says why a torch device does not exist here; torch is imported only for a non-CPU device.
Each returns one line without its config key (the caller puts the key first), or None.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from lakeflow.models.info import ModelInfo, is_hub_id
from lakeflow.models.tiny import TINY_PREFIX

HUB_TIMEOUT_S = 3.0  # longest wait for the hub's answer about a model that is not cached (the check has 10 s)
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt")


def _has_weights(directory: Path) -> bool:
    return any(next(directory.glob(pattern), None) is not None for pattern in WEIGHT_FILES)


def _how_to_get(ref: str) -> str:
    return (
        f"download it where the hub can be reached (`hf download {ref}`, into this machine's cache), or convert "
        f"a copy you have (`lakeflow models convert SOURCE --out {ref}`: a directory of that name is the model)"
    )


def _ask_hub(ref: str, timeout_s: float) -> BaseException | None:
    """The error of asking the hub about `ref` (None: it has it), given up after `timeout_s` in a daemon
    thread, so a resolver or proxy that hangs cannot hold the check."""
    from huggingface_hub import HfApi

    outcome: list[BaseException | None] = []

    def ask() -> None:
        try:
            HfApi().model_info(ref, timeout=timeout_s)
            outcome.append(None)
        except Exception as e:  # reported to the user as the hub's answer
            outcome.append(e)

    thread = threading.Thread(target=ask, name="lakeflow-hub-check", daemon=True)
    thread.start()
    thread.join(timeout_s + 1.0)
    return outcome[0] if outcome else TimeoutError(f"no answer within {timeout_s:g} s")


def _hub_problem(ref: str, timeout_s: float) -> str | None:
    try:
        from huggingface_hub import constants, try_to_load_from_cache
        from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError
    except ImportError:
        return f"{ref!r} is not a local directory, and huggingface_hub (which fetches hub ids) is not installed"
    cached = try_to_load_from_cache(ref, "config.json")
    if isinstance(cached, str) and _has_weights(Path(cached).parent):
        return None  # in the cache: transformers and vLLM load it from there
    where = f"the Hugging Face cache ({constants.HF_HUB_CACHE})"
    partly = "only partly in" if isinstance(cached, str) else "not in"
    what = f"{ref!r} is not a directory here and {partly} {where}"
    if constants.HF_HUB_OFFLINE:
        return f"{what} and the hub is offline (HF_HUB_OFFLINE is set): {_how_to_get(ref)}"
    error = _ask_hub(ref, timeout_s)
    if error is None:
        return None  # the process downloads it when it starts
    if isinstance(error, GatedRepoError):
        return f"{ref!r} is gated on the hub: accept its terms there and log in (`hf auth login`)"
    if isinstance(error, RepositoryNotFoundError):
        return (
            f"{ref!r} is not a directory here and the hub ({constants.ENDPOINT}) has no such model (or it is "
            "private: log in with `hf auth login`): check the name, or give a model directory"
        )
    reason = str(error).splitlines()[0] if str(error) else type(error).__name__
    return f"{what} and the hub ({constants.ENDPOINT}) cannot be reached ({reason}): {_how_to_get(ref)}"


def model_problem(ref: str, timeout_s: float = HUB_TIMEOUT_S) -> str | None:
    """Why model `ref` cannot be loaded here (None: it can): a `tiny:` recipe always can; a directory must
    hold config.json and weights; a hub id must be in the local cache or on a hub that answers."""
    if ref.startswith(TINY_PREFIX):
        return None
    path = Path(ref)  # as transformers and vLLM take it: no ~ expansion
    if path.is_dir():
        if not (path / "config.json").is_file():
            return f"{ref} is not a Hugging Face model directory (no config.json): convert the model into it"
        if not _has_weights(path):
            return f"{ref} holds no weights ({', '.join(WEIGHT_FILES)}): convert the model into it"
        return None
    if path.exists():
        return f"{ref} is a file, not a model directory: convert it with `lakeflow models convert {ref} --out DIR`"
    if not is_hub_id(ref):
        return f"no model directory at {ref}: convert a model there (`lakeflow models convert SOURCE --out {ref}`)"
    return _hub_problem(ref, timeout_s)


def chat_template_problem(info: ModelInfo) -> str | None:
    """The problem of rolling out or evaluating `info`'s model with lakeflow's workflows without a chat template."""
    if info.chat_template:
        return None
    return (
        f"{info.ref!r} has no chat template (tokenizer_config.json chat_template, chat_template.jinja), and the "
        "shipped workflows and the evaluation render every prompt as chat with it: use an instruct model, or add "
        "the model's chat_template.jinja to its directory"
    )


def max_len_problem(info: ModelInfo, max_model_len: int | None) -> str | None:
    """The problem of an engine's `max_model_len` above the positions of `info`'s model (None: fine, or unset)."""
    if max_model_len is None or info.max_positions is None or max_model_len <= info.max_positions:
        return None
    return (
        f"{max_model_len} exceeds the {info.max_positions} positions of {info.ref!r} (config.json "
        "max_position_embeddings): lower it, or leave it out to use the model's"
    )


def _accelerator(torch: Any, kind: str) -> tuple[bool, int]:
    """(built with it and available, devices) for a torch device type such as 'cuda', 'mps', 'xpu'."""
    if kind == "mps":
        available = bool(torch.backends.mps.is_available())
        return available, int(available)
    module = getattr(torch, kind, None)
    if module is None or not hasattr(module, "is_available"):
        return False, 0
    available = bool(module.is_available())
    return available, int(module.device_count()) if available and hasattr(module, "device_count") else 0


def device_problem(device: str) -> str | None:
    """Why torch device `device` ('cpu', 'cuda', 'cuda:1', 'mps', …) does not exist here (None: it does)."""
    if device == "cpu":
        return None
    try:
        import torch
    except ImportError:
        return f"{device!r} needs torch, which is not installed (pip install 'lakeflow[train]')"
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError) as e:
        return f"{device!r} is not a torch device ({str(e).splitlines()[0]}): use 'cpu', 'cuda' or 'cuda:N'"
    if parsed.type == "cpu":
        return None
    available, count = _accelerator(torch, parsed.type)
    if not available:
        kind = parsed.type.upper()
        built = (
            f" (torch {torch.__version__} is built without CUDA)" if kind == "CUDA" and not torch.version.cuda else ""
        )
        return f"{device!r}, but this machine has no {kind} device{built}: use 'cpu', or run on a machine with one"
    if parsed.index is not None and parsed.index >= count:
        return f"{device!r}, but this machine has {count} {parsed.type.upper()} device(s) (0 to {count - 1})"
    return None
