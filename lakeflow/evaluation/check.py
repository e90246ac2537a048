"""The check of an evaluation config before `lakeflow eval` starts: its dataset loader, reward and engine
resolve, every task type its prompts are known to have is scored by some reward (never a silent 0), and a
`chat_template` setting names a template that compiles."""

from __future__ import annotations

from lakeflow.dataflow.check import check_dataset
from lakeflow.dataflow.datasets import task_types
from lakeflow.errors import ConfigError, PluginError
from lakeflow.evaluation.config import EvalConfig
from lakeflow.raas.config import FactoryEngineConfig
from lakeflow.raas.engines import engine_factory, template_setting_problem
from lakeflow.raas.rewards import build_reward


def check_eval_config(config: EvalConfig, key: str = "") -> list[str]:
    """Problems of `config` (empty: it can start), each one line beginning with its key under `key`."""
    prefix = f"{key}." if key else ""
    problems = check_dataset(config.dataset, f"{prefix}dataset")
    try:
        if config.reward is not None:
            build_reward("", config.reward_max_chars, config.reward, key=f"{prefix}reward")
        elif config.environment is None:  # (an environment scores its own episodes)
            for task_type in sorted(task_types(config.dataset) or ()):
                build_reward(task_type, key=f"{prefix}reward")
    except PluginError as e:
        problems.append(str(e) if config.reward is not None else f"{prefix}dataset: {e}")
    except ConfigError as e:  # a dataset file that cannot be read
        problems.append(f"{prefix}dataset: {e}")
    if isinstance(config.engine, FactoryEngineConfig):
        try:
            engine_factory(config.engine, key=f"{prefix}engine.factory")
        except PluginError as e:
            problems.append(str(e))
    if config.chat_template is not None and (problem := template_setting_problem(config.chat_template)) is not None:
        problems.append(f"{prefix}chat_template: {problem}")
    return problems
