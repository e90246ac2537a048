"""The rollout service (RaaS): claim tasks, generate with an engine, score, commit groups to the lake.

`RolloutService` is the loop; engines, workflows and rewards are plugins in plain
dictionaries (`ENGINES`, `WORKFLOWS`, `REWARDS`) with `build_*` factories.
"""

from lakeflow.raas.config import HFEngineConfig, RaasConfig, VLLMEngineConfig, load_config
from lakeflow.raas.engines import ENGINES, Completion, Engine, HFEngine, build_engine
from lakeflow.raas.rewards import REWARDS, Reward, build_reward, math_reward
from lakeflow.raas.service import RolloutService
from lakeflow.raas.service.metrics import RaasStats
from lakeflow.raas.workflows import WORKFLOWS, Sampling, Trajectory, build_workflow

__all__ = [
    "ENGINES",
    "REWARDS",
    "WORKFLOWS",
    "Completion",
    "Engine",
    "HFEngine",
    "HFEngineConfig",
    "RaasConfig",
    "RaasStats",
    "Reward",
    "RolloutService",
    "Sampling",
    "Trajectory",
    "VLLMEngineConfig",
    "build_engine",
    "build_reward",
    "build_workflow",
    "load_config",
    "math_reward",
]
