"""The environments that ship with lakeflow, each an ordinary user of `lakeflow.raas.agent.env`.

`SHIPPED_ENVIRONMENTS` maps a config's `environment.name` to a factory called with the config's
`args` as keyword arguments, once per episode. `DATASETS` maps the same names to the functions that
write their tasks (`python -m lakeflow.raas.agent.envs NAME --out tasks.jsonl`, read by a
`{type: file}` dataset); python_math takes any math dataset, e.g. `{type: reasoning_gym}`. `DEMOS` maps
the names that ship demonstrations to the functions that write them (`--demos`: conversations for a
trainer's `warmup.data`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lakeflow.raas.agent.env import EnvironmentFactory
from lakeflow.raas.agent.envs import calculator, craft, lookup, search
from lakeflow.raas.agent.envs.calculator import CalculatorEnv
from lakeflow.raas.agent.envs.craft import CraftEnv
from lakeflow.raas.agent.envs.lookup import LookupEnv
from lakeflow.raas.agent.envs.python_math import PythonMathEnv
from lakeflow.raas.agent.envs.search import SearchEnv

__all__ = [
    "DATASETS",
    "DEMOS",
    "SHIPPED_ENVIRONMENTS",
    "CalculatorEnv",
    "CraftEnv",
    "LookupEnv",
    "PythonMathEnv",
    "SearchEnv",
]

SHIPPED_ENVIRONMENTS: dict[str, EnvironmentFactory] = {
    "python_math": PythonMathEnv,
    "search": SearchEnv,
    "craft": CraftEnv,
    "lookup": LookupEnv,
    "calculator": CalculatorEnv,
}

# name -> make_tasks(n, seed, **options) -> rows {prompt_id, prompt, answer, task_type}
DATASETS: dict[str, Callable[..., list[dict[str, str]]]] = {
    "search": search.make_tasks,
    "craft": craft.make_tasks,
    "lookup": lookup.make_tasks,
    "calculator": calculator.make_tasks,
}

# name -> make_demos(n, seed, **options) -> conversations {messages, tools}
DEMOS: dict[str, Callable[..., list[dict[str, Any]]]] = {"calculator": calculator.make_demos}
