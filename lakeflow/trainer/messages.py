"""What the trainer and its writer (`writer.py`) say to each other: the trainer's requests (`Step`,
`Checkpoint`, `Stop`) and the writer's replies (`Ready`, `Published`, `Checkpointed`, `Closed`, `Failed`).
They cross a multiprocessing queue to a spawned writer, so each is a small picklable dataclass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lakeflow.trainer.shared import SlotLayout
from lakeflow.trainer.stats import StepStats

# --- requests (trainer -> writer) -----------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    """Write the optimizer checkpoint of `version` (its tensors in shared slot `slot`)."""

    version: int
    slot: str | None  # None: the optimizer state holds no tensor
    layout: SlotLayout | None  # of `slot`
    skeleton: Any  # the optimizer state with each tensor replaced by its path (`shared.flatten`)
    info: bytes  # trainer.json


@dataclass(frozen=True)
class Step:
    """Write step `stats.step`'s heartbeat and publish `version` (its state in shared slot `slot`), then its
    checkpoint when one is due."""

    version: int
    slot: str
    stats: StepStats
    checkpoint: Checkpoint | None = None


@dataclass(frozen=True)
class Stop:
    """Close and end (after the requests sent before it)."""


# --- replies (writer -> trainer) ------------------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    """The writer holds the published base and takes requests."""


@dataclass(frozen=True)
class Published:
    """`version` is published from `slot`; `freed`, the previous base's slot, may be filled again."""

    version: int
    slot: str
    freed: str
    stats: StepStats  # as written, with the writer's own


@dataclass(frozen=True)
class Checkpointed:
    """The checkpoint of `version` is written; its slot may be filled again."""

    version: int
    slot: str | None


@dataclass(frozen=True)
class Closed:
    """The writer closed after a `Stop`."""


@dataclass(frozen=True)
class Failed:
    """The writer failed with `error` (the trainer raises it) and ended."""

    error: BaseException


Request = Step | Checkpoint | Stop
WriterReply = Ready | Published | Checkpointed | Closed | Failed
