"""The trainer service: wait for batch N in the lake, train on it, publish weight version N + 1.

`Trainer` is the process loop (`lakeflow train`); `losses` holds the objectives (GRPO, M2PO,
SFT, KL) as pure torch functions; `data` turns a batch object into padded tensors. Names are
imported on first use, so reading a trainer config (`lakeflow run`, `launch`) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "TrainerConfig": "lakeflow.trainer.config",
    "load_config": "lakeflow.trainer.config",
    "Stopped": "lakeflow.trainer.loop",
    "Trainer": "lakeflow.trainer.loop",
    "LOSSES": "lakeflow.trainer.losses",
    "build_loss": "lakeflow.trainer.losses",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'lakeflow.trainer' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
