"""Names that do not resolve stop every command before anything starts: one line per problem naming the key,
exit code 1, no traceback (`lakeflow run`, `launch`, and the processes they start: raas, train, dataflow, eval)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from lakeflow.cli import main

WORKFLOWS = "agent, code_select, code_testgen, rlvr, solve_verify"


def run_config(tmp_path: Path, raas: dict[str, Any] | None = None, **dataflow: Any) -> Path:
    config = {
        "name": "check",
        "steps": 1,
        "models": [
            {
                "id": "policy",
                "dataflow": {"vocab_size": 512, "n_samples": 2, "prompts_per_step": 2, **dataflow},
                "trainer": {"model": "tiny:check"},
                "raas": {"replicas": 1, "config": raas or {}},
            }
        ],
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def refused(*args: str) -> list[str]:
    """The stderr lines of a command that must fail with exit code 1 and no traceback."""
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 1, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    return result.stderr.strip().splitlines()


def refused_run(tmp_path: Path, config: Path) -> list[str]:
    run_dir = tmp_path / "run"
    lines = refused("run", str(config), "--run-dir", str(run_dir))
    assert not run_dir.exists()  # refused before any process started or anything was written
    return lines


def test_an_unknown_shipped_name(tmp_path: Path) -> None:
    lines = refused_run(tmp_path, run_config(tmp_path, {"workflow": "rvlr"}))
    assert lines == [
        f"Error: models[0].raas.config.workflow: unknown workflow 'rvlr'; known: {WORKFLOWS} (or give "
        "'package.module:attr', or register one in the entry-point group 'lakeflow.workflows')"
    ]


def test_a_bad_import_path(tmp_path: Path) -> None:
    (line,) = refused_run(tmp_path, run_config(tmp_path, {"reward": "no_such_pkg_lf.rewards:exact"}))
    assert line.startswith("Error: models[0].raas.config.reward: cannot import module 'no_such_pkg_lf.rewards'")
    assert "put it on PYTHONPATH" in line
    (line,) = refused_run(tmp_path, run_config(tmp_path, {"reward": "os.path:no_such_thing"}))
    assert line == (
        "Error: models[0].raas.config.reward: module 'os.path' has no attribute 'no_such_thing' "
        "(from 'os.path:no_such_thing')"
    )


def test_the_wrong_shape(tmp_path: Path) -> None:
    (line,) = refused_run(tmp_path, run_config(tmp_path, {"reward": "os:sep"}))
    assert line == "Error: models[0].raas.config.reward: reward 'os:sep' is not callable"
    (line,) = refused_run(tmp_path, run_config(tmp_path, {"workflow": "os.path:exists"}))
    assert line.startswith(
        "Error: models[0].raas.config.workflow: workflow 'os.path:exists' is not callable as "
        "(task, engines, reward, sampling): too many positional arguments"
    )


def test_roles_that_do_not_match_the_workflow(tmp_path: Path) -> None:
    config = run_config(tmp_path, {"workflow": "solve_verify", "roles": {"solver": "policy", "judge": "policy"}})
    assert refused_run(tmp_path, config) == [
        "Error: models[0].raas.config.roles: roles ['judge'] are not played by workflow 'solve_verify' "
        "(it plays: solver, verifier)"
    ]
    config = run_config(tmp_path, {"roles": {"solver": "policy"}})  # rlvr plays 'policy' only
    assert refused_run(tmp_path, config) == [
        "Error: models[0].raas.config.roles: roles ['solver'] are not played by workflow 'rlvr' (it plays: policy)"
    ]


def test_an_unknown_task_type_is_refused_unless_a_reward_is_named(tmp_path: Path) -> None:
    rows = tmp_path / "poems.jsonl"
    rows.write_text(json.dumps({"prompt": "a haiku", "answer": "", "task_type": "poetry"}) + "\n")
    dataset = {"type": "file", "path": str(rows)}
    (line,) = refused_run(tmp_path, run_config(tmp_path, dataset=dataset))
    assert line.startswith(
        "Error: models[0].dataflow.dataset: no reward for task_type 'poetry' (known: code, math, reasoning_gym"
    )
    assert "set `reward` in the rollout config" in line
    # an explicit reward scores every task: the same run is accepted (checked only, nothing started)
    from lakeflow.run import load_run_config
    from lakeflow.run.check import check_run_config

    assert check_run_config(load_run_config(run_config(tmp_path, {"reward": "math"}, dataset=dataset))) == []


def test_every_problem_is_listed_on_its_own_line(tmp_path: Path) -> None:
    config = run_config(
        tmp_path,
        {"workflow": "rvlr", "reward": "os:sep", "engine": {"type": "factory", "factory": "no_such_pkg_lf:make"}},
        dataset={"type": "loader", "loader": "os.path:join", "args": {"colour": "red"}},
    )
    lines = refused_run(tmp_path, config)
    assert [line.split(":")[1].strip() for line in lines] == [
        "models[0].dataflow.dataset.loader",
        "models[0].raas.config.workflow",
        "models[0].raas.config.reward",
        "models[0].raas.config.engine.factory",
    ]


def test_launch_checks_the_same(tmp_path: Path) -> None:
    out = tmp_path / "out"
    lines = refused(
        "launch",
        str(run_config(tmp_path, {"workflow": "rvlr"})),
        "--target",
        "k8s",
        "--lake",
        "s3://b/x",
        "--out",
        str(out),
    )
    assert len(lines) == 1 and lines[0].startswith("Error: models[0].raas.config.workflow: unknown workflow 'rvlr'")
    assert not out.exists()


def write(tmp_path: Path, name: str, data: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize(
    ("command", "config", "line"),
    [
        (["raas", "--model", "policy"], {"workflow": "rvlr"}, "Error: workflow: unknown workflow 'rvlr'"),
        (
            ["train", "--model", "policy"],
            {"model": "tiny:x", "loss": {"type": "function", "function": "grpo", "params": {"clip": 0.1}}},
            "Error: loss.params: clip: Extra inputs are not permitted",
        ),
        (
            ["dataflow"],
            {"models": [{"id": "p", "vocab_size": 8, "dataset": {"type": "loader", "loader": "nope_lf:rows"}}]},
            "Error: models[0].dataset.loader: cannot import module 'nope_lf'",
        ),
        (
            ["eval", "--model", "policy"],
            {"dataset": {"type": "synthetic"}, "reward": "rvlr"},
            "Error: reward: unknown reward 'rvlr'; known: code, math, reasoning_gym",
        ),
    ],
    ids=["raas", "train", "dataflow", "eval"],
)
def test_each_process_checks_its_own_config(tmp_path: Path, command: list[str], config: dict[str, Any], line: str):
    lake = tmp_path / "lake"
    lines = refused(*command, "--lake", str(lake), "--config", write(tmp_path, "config.yaml", config))
    assert len(lines) == 1 and lines[0].startswith(line), lines
    assert not lake.exists()


def test_autoscale_checks_its_actuator_and_the_run_it_starts(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    (line,) = refused("autoscale", "--lake", lake, "--actuator", "nomad", "--model", "policy")
    assert line.startswith("Error: --actuator: unknown actuator 'nomad'; known: k8s, local, skypilot")
    config = str(run_config(tmp_path, {"workflow": "rvlr"}))
    run_dir = str(tmp_path / "run")
    (line,) = refused("autoscale", "--lake", lake, "--actuator", "local", "--config", config, "--run-dir", run_dir)
    assert line.startswith("Error: models[0].raas.config.workflow: unknown workflow 'rvlr'")
    assert not (tmp_path / "run").exists()  # no rollout service was started, no log written
