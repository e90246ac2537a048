"""A rollout pool in another region: its region and weights source are pool settings that reach the
rollout processes' configs; trajectories still go to the run's lake."""

from __future__ import annotations

from pathlib import Path

import yaml

from lakeflow.configfile import load_config_file
from lakeflow.run.config import RunConfig
from lakeflow.run.processes import raas_spec

CONFIG = Path(__file__).resolve().parents[2] / "jobs" / "examples" / "tiny-math.yaml"


def test_pool_declares_region_and_weights_source(tmp_path: Path) -> None:
    data = yaml.safe_load(CONFIG.read_text())
    pool = data["models"][0].setdefault("raas", {})
    pool.setdefault("config", {}).update(
        {"region": "eu-west-1", "weights_url": "https://weights.example.com/run", "weights_options": {"timeout": 30}}
    )
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    config = load_config_file(RunConfig, path)
    spec = raas_spec(config, config.models[0], 0)
    raas = spec.config
    assert raas["region"] == "eu-west-1" and raas["weights_url"] == "https://weights.example.com/run"
    assert raas["weights_options"] == {"timeout": 30}
