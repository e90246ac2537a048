"""The check of a whole run config before `lakeflow run` or `lakeflow launch` starts anything.

It collects the problems of every process's config (`check_raas_config` of each rollout pool,
`check_trainer_config`, `check_dataset`, `check_eval_config`), each naming its key in the run config
(`models[0].raas.config.workflow: unknown workflow 'rvlr'; known: ...`), and the run's own: a task type
of a model's dataset that no reward scores, in a pool with no explicit `reward`. The processes check
their own configs again when they start (a name must resolve there too: import paths and entry
points do; a registration made only in the launching process does not).
"""

from __future__ import annotations

from lakeflow.dataflow.check import check_dataset
from lakeflow.dataflow.datasets import task_types
from lakeflow.errors import ConfigError
from lakeflow.evaluation.check import check_eval_config
from lakeflow.raas.check import check_raas_config, task_type_problem
from lakeflow.run.config import RunConfig
from lakeflow.trainer.check import check_trainer_config

# Keys of a region's overrides that its pool's check must look at again (the rest are the home pool's).
_REGION_KEYS = ("workflow", "roles", "reward", "environment")


def check_run_config(config: RunConfig) -> list[str]:
    """Every problem of the run config (empty: it can start), one line each, naming its key."""
    problems: list[str] = []
    for i, m in enumerate(config.models):
        at = f"models[{i}]"
        problems += check_trainer_config(m.trainer, f"{at}.trainer")
        dataset = m.dataflow_config().dataset
        problems += check_dataset(dataset, f"{at}.dataflow.dataset")
        pools = [(f"{at}.raas.config", m.raas)]
        for j, (r, (_, pool)) in enumerate(zip(m.regions, m.pools()[1:], strict=True)):
            if set(r.config) & set(_REGION_KEYS):
                pools.append((f"{at}.regions[{j}].config", pool))
        for key, pool in pools:
            problems += check_raas_config(pool.config, key)
        try:
            types = sorted(task_types(dataset) or ()) if dataset is not None else []
        except ConfigError as e:  # a dataset file that cannot be read: the dataflow would stop on it
            problems.append(f"{at}.dataflow.dataset: {e}")
            types = []
        for key, pool in pools:
            if pool.config.environment is not None:
                continue  # an agent environment scores its own episodes: no task-type reward is used
            for task_type in types:
                if (problem := task_type_problem(task_type, pool.config.reward, f"{at}.dataflow.dataset")) is not None:
                    problems.append(problem if key.endswith(".raas.config") else f"{problem} (the pool of {key})")
        if m.eval is not None:  # the eval process scores with the pool's reward unless its section names one
            reward = m.eval.reward if m.eval.reward is not None else m.raas.config.reward
            section = m.eval.model_copy(update={"reward": reward})
            problems += check_eval_config(section, f"{at}.eval")
    return list(dict.fromkeys(problems))
