"""Tracker plugins: W&B, TensorBoard and MLflow through their own libraries, imported lazily.

`TRACKERS` maps a name to a factory `(config, run, params) -> Tracker`; `build_tracker` builds one.
A tracker is one run of that tool: `run` names it (`trainer_steps/policy`, ...), `params` are logged
once as its configuration. Offline use: W&B with WANDB_MODE=offline (files under `dir/wandb/`),
TensorBoard event files under `dir/<run>/` (the configuration as a text summary and in the HParams
dashboard), MLflow's file store `file:<dir>` (MLflow 3 refuses its file store unless
MLFLOW_ALLOW_FILE_STORE is true; lakeflow sets it for a `file:` URI it was given) or a database such
as `sqlite:///<path>` (needs sqlalchemy and alembic, in the `tracking` extra).
A missing library raises MissingExtraError naming the extra `tracking`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from lakeflow.errors import MissingExtraError
from lakeflow.tracking.config import TrackerConfig


class Tracker(Protocol):
    """One run of a tracking tool."""

    def log(self, values: Mapping[str, float], step: int, wall_time: float | None = None) -> None:
        """Scalars at `step` (wall_time: Unix seconds, default now)."""

    def close(self) -> None:
        """Flush and finish the run."""


def _flat(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in params.items():
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = str(value)
    return out


class TensorBoardTracker:
    """Event files written with tensorboard's own writer (no torch, no TensorFlow)."""

    def __init__(self, config: TrackerConfig, run: str, params: Mapping[str, Any]) -> None:
        try:
            from tensorboard.compat.proto.event_pb2 import Event
            from tensorboard.compat.proto.summary_pb2 import Summary
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ImportError as e:
            raise MissingExtraError("tensorboard", "tracking") from e
        self._event, self._summary = Event, Summary
        self.logdir = str(Path(config.dir) / run)
        self._writer = EventFileWriter(self.logdir)
        if params:
            flat = _flat(params)
            text = "\n".join(f"{k}: {v}" for k, v in sorted(flat.items()))
            self._writer.add_event(Event(wall_time=time.time(), file_version="brain.Event:2"))
            self._writer.add_event(Event(wall_time=time.time(), step=0, summary=_text(Summary, "config", text)))
            self._writer.add_event(Event(wall_time=time.time(), step=0, summary=_hparams(Summary, flat)))

    def log(self, values: Mapping[str, float], step: int, wall_time: float | None = None) -> None:
        summary = self._summary(value=[self._summary.Value(tag=k, simple_value=v) for k, v in values.items()])
        self._writer.add_event(self._event(wall_time=wall_time or time.time(), step=step, summary=summary))

    def close(self) -> None:
        self._writer.flush()
        self._writer.close()


def _text(summary: Any, tag: str, text: str) -> Any:
    from tensorboard.compat.proto.summary_pb2 import SummaryMetadata
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.types_pb2 import DT_STRING

    meta = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="text"))
    tensor = TensorProto(dtype=DT_STRING, string_val=[text.encode()])
    return summary(value=[summary.Value(tag=tag, metadata=meta, tensor=tensor)])


def _hparams(summary: Any, flat: Mapping[str, str]) -> Any:
    """The HParams dashboard's session-start record: every config value, numbers as numbers."""
    from tensorboard.compat.proto.summary_pb2 import SummaryMetadata
    from tensorboard.plugins.hparams import metadata, plugin_data_pb2

    info = plugin_data_pb2.SessionStartInfo()
    for key, value in flat.items():
        number = _number(value)
        if number is None:
            info.hparams[key].string_value = value
        else:
            info.hparams[key].number_value = number
    content = plugin_data_pb2.HParamsPluginData(session_start_info=info, version=metadata.PLUGIN_DATA_VERSION)
    meta = SummaryMetadata(
        plugin_data=SummaryMetadata.PluginData(plugin_name=metadata.PLUGIN_NAME, content=content.SerializeToString())
    )
    return summary(value=[summary.Value(tag=metadata.SESSION_START_INFO_TAG, metadata=meta)])


def _number(text: str) -> float | None:
    if text in ("True", "False", "None"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


class MlflowTracker:
    """One MLflow run in experiment `project`, through MlflowClient (no global active run)."""

    def __init__(self, config: TrackerConfig, run: str, params: Mapping[str, Any]) -> None:
        try:
            from mlflow.entities import Metric, Param
            from mlflow.tracking import MlflowClient
        except ImportError as e:
            raise MissingExtraError("mlflow", "tracking") from e
        self._metric = Metric
        uri = config.dir if "://" in config.dir or config.dir.startswith("file:") else None
        if uri is None:
            uri = f"file:{os.path.abspath(config.dir)}"
        if uri.startswith("file:"):  # MLflow 3 keeps the file store behind this switch
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        if uri.startswith(("sqlite:", "postgresql:", "mysql:", "mssql:")):
            try:  # MLflow's database store; mlflow-skinny alone would fail with "unsupported URI"
                import alembic  # noqa: F401
                import sqlalchemy  # noqa: F401
            except ImportError as e:
                raise MissingExtraError("sqlalchemy and alembic (MLflow's database store)", "tracking") from e
        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        experiment = self.client.get_experiment_by_name(config.project)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(config.project)
        tags = {"lakeflow.run": run, **({"group": config.group} if config.group else {})}
        self.run_id = self.client.create_run(experiment_id, run_name=run.replace("/", "-"), tags=tags).info.run_id
        flat = [Param(k[:250], v[:6000]) for k, v in sorted(_flat(params).items())]
        for start in range(0, len(flat), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=flat[start : start + 100])
        if flat:
            self.client.set_tag(self.run_id, "lakeflow.params", str(len(flat)))

    def log(self, values: Mapping[str, float], step: int, wall_time: float | None = None) -> None:
        ms = int((wall_time or time.time()) * 1000)
        metrics = [self._metric(k, v, ms, step) for k, v in values.items()]
        for start in range(0, len(metrics), 1000):  # MLflow's batch limit
            self.client.log_batch(self.run_id, metrics=metrics[start : start + 1000])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


STEP_METRIC = "lakeflow/step"  # W&B: the x-axis of every chart (weight version or trainer step)


class WandbTracker:
    """One W&B run (WANDB_MODE=offline writes it under `dir/wandb/` for a later `wandb sync`)."""

    def __init__(self, config: TrackerConfig, run: str, params: Mapping[str, Any]) -> None:
        try:
            import wandb
        except ImportError as e:
            raise MissingExtraError("wandb", "tracking") from e
        os.makedirs(config.dir, exist_ok=True)
        self.run = wandb.init(
            project=config.project,
            dir=config.dir,
            name=run,
            group=config.group,
            config=dict(params),
            reinit="create_new",  # export opens several runs in one process
        )
        # W&B's own step must only grow, and one run can hold rows of several models (each at its own
        # version): the version goes in as a metric that every chart uses as its x-axis instead.
        self.run.define_metric(STEP_METRIC)
        self.run.define_metric("*", step_metric=STEP_METRIC)

    def log(self, values: Mapping[str, float], step: int, wall_time: float | None = None) -> None:
        self.run.log({**values, STEP_METRIC: step})

    def close(self) -> None:
        self.run.finish()


TRACKERS: dict[str, Callable[[TrackerConfig, str, Mapping[str, Any]], Tracker]] = {
    "tensorboard": TensorBoardTracker,
    "mlflow": MlflowTracker,
    "wandb": WandbTracker,
}


def build_tracker(config: TrackerConfig, run: str, params: Mapping[str, Any] | None = None) -> Tracker:
    """The tracker named by `config.type`, as one run named `run`."""
    try:
        factory = TRACKERS[config.type]
    except KeyError as e:
        raise ValueError(f"unknown tracker {config.type!r}; known: {', '.join(sorted(TRACKERS))}") from e
    return factory(config, run, params or {})
