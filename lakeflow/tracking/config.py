"""Which tracker a process logs to, as a config section (`tracker:`) or `--tracker NAME`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from lakeflow.configfile import StrictConfig


class TrackerConfig(StrictConfig):
    """A tracker plugin (TRACKERS in lakeflow.tracking.trackers) and where it writes."""

    type: Literal["wandb", "tensorboard", "mlflow"] = Field(description="The tracker's library.")
    dir: str = Field(
        "trackers",
        description=(
            "Where it writes: TensorBoard's log directory, W&B's run directory, MLflow's tracking URI (a local "
            "folder becomes its file store `file:<folder>`; an http(s):// URI names a server)."
        ),
    )
    project: str = Field("lakeflow", description="W&B project / MLflow experiment name.")
    group: str | None = Field(None, description="W&B group and MLflow tag `group` (lakeflow run: the run's name).")


def parse_tracker(value: str | None, directory: str | None = None) -> TrackerConfig | None:
    """The config for `--tracker NAME [--tracker-dir DIR]`; None when no tracker was named."""
    if value is None:
        return None
    return TrackerConfig.model_validate({"type": value, **({"dir": directory} if directory else {})})
