"""The trainer service: wait for batch N in the lake, train on it, publish weight version N + 1.

`Trainer` is the process loop (`lakeflow train`); `losses` holds the objectives (GRPO, M2PO,
SFT, KL) as pure torch functions; `data` turns a batch object into padded tensors.
"""

from lakeflow.trainer.config import TrainerConfig, load_config
from lakeflow.trainer.loop import Stopped, Trainer
from lakeflow.trainer.losses import LOSSES, build_loss

__all__ = ["LOSSES", "Stopped", "Trainer", "TrainerConfig", "build_loss", "load_config"]
