"""Trackers (W&B, TensorBoard, MLflow) fed from the lake's metric tables, live or replayed by export."""

from lakeflow.tracking.config import TrackerConfig
from lakeflow.tracking.sink import MetricSink
from lakeflow.tracking.trackers import TRACKERS, Tracker, build_tracker

__all__ = ["TRACKERS", "MetricSink", "Tracker", "TrackerConfig", "build_tracker"]
