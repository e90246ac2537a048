"""The shipped environments as a user's config names them: factories, arguments, task files, the plugin
resolver, and the tiny model's chat template rendering their tools."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lakeflow.dataflow.config import FileDataset
from lakeflow.dataflow.datasets import load_prompts
from lakeflow.plugins import resolve
from lakeflow.raas.agent.envs import DATASETS, SHIPPED_ENVIRONMENTS
from lakeflow.raas.agent.envs.__main__ import main
from tests.raas.agent.play import play, task_of

ARGS = {
    "python_math": {"wall_s": 2.0},
    "search": {"top_k": 2},
    "craft": {},
    "lookup": {"call_credit": 0.1},
    "calculator": {"max_turns": 4},
}


def test_every_shipped_factory_builds_an_environment_from_config_args() -> None:
    assert set(SHIPPED_ENVIRONMENTS) == {"python_math", "search", "craft", "lookup", "calculator"}
    for name, factory in SHIPPED_ENVIRONMENTS.items():
        env = factory(**ARGS[name])
        for method in ("reset", "tools", "step", "final_reward"):
            assert callable(getattr(env, method)), (name, method)
        with pytest.raises(TypeError, match="colour"):
            factory(colour="red")


def test_names_resolve_through_the_plugin_resolver() -> None:
    assert resolve("environment", "craft", SHIPPED_ENVIRONMENTS) is SHIPPED_ENVIRONMENTS["craft"]
    by_path = resolve("environment", "lakeflow.raas.agent.envs.search:SearchEnv", SHIPPED_ENVIRONMENTS)
    assert by_path is SHIPPED_ENVIRONMENTS["search"]


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_the_generator_writes_a_file_dataset_the_dataflow_reads(name: str, tmp_path: Path) -> None:
    out = tmp_path / f"{name}.jsonl"
    assert main([name, "--n", "5", "--seed", "3", "--out", str(out)]) == 0
    again = tmp_path / "again.jsonl"
    assert main([name, "--n", "5", "--seed", "3", "--out", str(again)]) == 0
    assert out.read_bytes() == again.read_bytes()  # deterministic
    table = load_prompts(FileDataset(path=str(out), name=name))
    assert table.num_rows == 5 and set(table.column("task_type").to_pylist()) == {f"agent:{name}"}
    row = table.to_pylist()[0]
    env = SHIPPED_ENVIRONMENTS[name]()
    messages = env.reset(task_of(row))
    assert messages[-1] == {"role": "user", "content": row["prompt"]}
    assert play(env, task_of(row), ["no tool, no answer"]).reward is not None


def test_the_generator_refuses_bad_options(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["search", "--set", "hops=5", "--out", str(tmp_path / "x.jsonl")]) == 1
    assert "hops must be 1 or 2" in capsys.readouterr().err
    assert main(["lookup", "--set", "colour=red", "--out", str(tmp_path / "x.jsonl")]) == 1
    assert "colour" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()


def test_the_tiny_agent_data_is_what_the_generator_writes(tmp_path: Path) -> None:
    data = Path(__file__).resolve().parents[3] / "jobs" / "examples" / "data" / "lookup.jsonl"
    out = tmp_path / "lookup.jsonl"
    assert main(["lookup", "--n", "256", "--seed", "0", "--out", str(out)]) == 0
    assert data.read_bytes() == out.read_bytes()
    assert {json.loads(line)["prompt"] for line in data.read_text().splitlines()} == {"Value?"}


@pytest.mark.parametrize(
    ("file", "args"),
    [("calculator.jsonl", ["--n", "1000"]), ("calculator-demos.jsonl", ["--demos", "--n", "64"])],
)
def test_the_calculator_recipe_data_is_what_the_generator_writes(file: str, args: list[str], tmp_path: Path) -> None:
    data = Path(__file__).resolve().parents[3] / "jobs" / "examples" / "data" / file
    out = tmp_path / file
    assert main(["calculator", *args, "--seed", "0", "--out", str(out)]) == 0
    assert data.read_bytes() == out.read_bytes()


JOBS = Path(__file__).resolve().parents[3] / "jobs"
AGENT_JOBS = [p for p in sorted(JOBS.rglob("*.yaml")) if "workflow: agent" in p.read_text()]
ENVIRONMENT_JOBS = [p for p in AGENT_JOBS if "\n        environment:" in p.read_text()]  # the rest: agent programs


@pytest.mark.parametrize("path", ENVIRONMENT_JOBS, ids=lambda p: p.name)
def test_agent_jobs_name_a_shipped_environment_that_plays_their_dataset(path: Path) -> None:
    import yaml

    for model in yaml.safe_load(path.read_text())["models"]:
        config = model["raas"]["config"]
        env_config = config["environment"]
        factory = SHIPPED_ENVIRONMENTS[env_config["name"]]
        factory(**env_config.get("args", {}))
        where = model["dataflow"]["dataset"]["path"]
        data = path.parent / where
        if data.exists():
            row = json.loads(data.read_text().splitlines()[0])
            assert factory(**env_config.get("args", {})).reset(task_of(row))
        else:  # paper-scale data is generated (and put in the bucket) by the commands in the file's comment
            name = where.rsplit("/", 1)[-1]
            assert f"python -m lakeflow.raas.agent.envs {env_config['name']}" in path.read_text()
            assert f"--out {name}" in path.read_text() and where.startswith("s3://")


def test_there_are_agent_jobs() -> None:
    assert {p.name for p in ENVIRONMENT_JOBS} >= {"tiny-agent.yaml", "agent-search-qwen3-8b.yaml"}
    gateway_jobs = {p.name for p in AGENT_JOBS} - {p.name for p in ENVIRONMENT_JOBS}
    harnesses = {"tiny-harness.yaml", "tiny-harness-sandbox.yaml", "swe-tiny.yaml", "swe-qwen25-coder-7b.yaml"}
    harnesses |= {"smollm2-files.yaml"}
    assert gateway_jobs == {"tiny-agent-openai.yaml"} | harnesses
