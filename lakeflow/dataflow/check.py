"""The check of a dataflow config before the process starts: every dataset loader it names resolves.

`check_dataset` imports a `type: loader` dataset's function (shipped names, `package.module:attr`, entry
points) and checks that it takes the configured `args`, without calling it; `check_dataflow_config` does so
for every model. Each problem is one line naming its config key; `lakeflow dataflow` (and `lakeflow run`,
`lakeflow launch`, `lakeflow eval` for their datasets) refuse to start on any.
"""

from __future__ import annotations

from lakeflow.dataflow.config import DataflowConfig, Dataset, LoaderDataset, MixDataset
from lakeflow.dataflow.datasets import dataset_loader
from lakeflow.errors import PluginError


def check_dataset(dataset: Dataset | None, key: str) -> list[str]:
    """Problems of one dataset (`key` is its config key, e.g. 'models[0].dataflow.dataset')."""
    if isinstance(dataset, MixDataset):
        return [p for name, part in dataset.parts.items() for p in check_dataset(part, f"{key}.parts.{name}")]
    if not isinstance(dataset, LoaderDataset):
        return []
    try:
        dataset_loader(dataset, key=f"{key}.loader")
    except PluginError as e:
        return [str(e)]
    return []


def check_dataflow_config(config: DataflowConfig, key: str = "") -> list[str]:
    """Problems of a dataflow config (empty: it can start), each one line beginning with its key."""
    prefix = f"{key}." if key else ""
    problems = []
    for i, m in enumerate(config.models):
        problems += check_dataset(m.dataset, f"{prefix}models[{i}].dataset")
    return problems
