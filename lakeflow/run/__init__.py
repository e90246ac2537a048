"""`lakeflow run`: the dataflow process, rollout services and trainers as local processes."""

from lakeflow.run.config import RunConfig, load_run_config
from lakeflow.run.launcher import Launcher

__all__ = ["Launcher", "RunConfig", "load_run_config"]
