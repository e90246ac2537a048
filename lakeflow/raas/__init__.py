"""The rollout service (RaaS): claim tasks, generate with an engine, score, commit groups to the lake.

`RolloutService` is the loop; engines, workflows and rewards are plugins in plain
dictionaries (`ENGINES`, `WORKFLOWS`, `REWARDS`) with `build_*` factories.

The names below load on first use, so that importing one light module of the package (an agent
program's worker process, `episodes/workers.py`) does not import the engines, the rewards and torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lakeflow.raas.config import HFEngineConfig, RaasConfig, VLLMEngineConfig, load_config
    from lakeflow.raas.engines import ENGINES, Completion, Engine, HFEngine, build_engine
    from lakeflow.raas.rewards import REWARDS, Reward, build_reward, math_reward
    from lakeflow.raas.service import RolloutService
    from lakeflow.raas.service.metrics import RaasStats
    from lakeflow.raas.workflows import WORKFLOWS, Sampling, Trajectory, build_workflow

_MODULES = {
    "lakeflow.raas.config": ["HFEngineConfig", "RaasConfig", "VLLMEngineConfig", "load_config"],
    "lakeflow.raas.engines": ["ENGINES", "Completion", "Engine", "HFEngine", "build_engine"],
    "lakeflow.raas.rewards": ["REWARDS", "Reward", "build_reward", "math_reward"],
    "lakeflow.raas.service": ["RolloutService"],
    "lakeflow.raas.service.metrics": ["RaasStats"],
    "lakeflow.raas.workflows": ["WORKFLOWS", "Sampling", "Trajectory", "build_workflow"],
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names}

__all__ = [  # the names of _MODULES
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


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'lakeflow.raas' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
