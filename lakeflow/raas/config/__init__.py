"""The rollout service's configuration, the floor of `raas/`: every section of a pool's config, typed and
validated, unknown keys refused. It imports nothing else of the rollout service.

`pool.py`: `RaasConfig` (one rollout service) and its engines; `environment.py`: the `environment` section
(an environment lakeflow plays); `agent.py`: the `agent` section (the user's program through the gateway);
`judge.py` and `reward_model.py`: the reward sections that ask a model; `serve.py`: a frozen model that
`lakeflow serve` answers chat completions with (a run's judge pool); `teacher.py`: the `teachers` section (frozen
models that score the sampled tokens: distillation).
"""

from lakeflow.raas.config.agent import AgentConfig, GatewayConfig
from lakeflow.raas.config.environment import EnvironmentConfig
from lakeflow.raas.config.judge import JudgeConfig
from lakeflow.raas.config.pool import (
    EngineConfig,
    FactoryEngineConfig,
    HFEngineConfig,
    RaasConfig,
    VLLMEngineConfig,
    command_config,
    load_config,
    parse_config,
    reward_function,
)
from lakeflow.raas.config.reward_model import RewardModelConfig
from lakeflow.raas.config.serve import ServeConfig
from lakeflow.raas.config.teacher import TeacherConfig, teacher_for

__all__ = [
    "AgentConfig",
    "EngineConfig",
    "EnvironmentConfig",
    "FactoryEngineConfig",
    "GatewayConfig",
    "HFEngineConfig",
    "JudgeConfig",
    "RaasConfig",
    "RewardModelConfig",
    "ServeConfig",
    "TeacherConfig",
    "VLLMEngineConfig",
    "command_config",
    "load_config",
    "parse_config",
    "reward_function",
    "teacher_for",
]
