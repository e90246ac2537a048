"""`check_run_config`: the problems of every process of a run, each under its key in the run config; every
job in jobs/ passes it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lakeflow.run import load_run_config
from lakeflow.run.check import check_run_config
from lakeflow.run.config import RunConfig
from lakeflow.run.observe import eval_specs

JOBS = [p for p in sorted((Path(__file__).resolve().parents[2] / "jobs").rglob("*.yaml")) if "steps:" in p.read_text()]


def run(raas: dict[str, Any] | None = None, **model: Any) -> RunConfig:
    m = {
        "id": "policy",
        "dataflow": {"vocab_size": 512, "dataset": {"type": "synthetic"}},
        "trainer": {"model": "tiny:x"},
        "raas": {"config": raas or {}},
        **model,
    }
    return RunConfig.model_validate({"name": "c", "steps": 1, "models": [m]})


@pytest.mark.parametrize("path", JOBS, ids=lambda p: p.name)
def test_every_job_passes_the_check(path: Path) -> None:
    assert check_run_config(load_run_config(path)) == []


def test_a_region_that_overrides_the_workflow_is_checked_under_its_own_key() -> None:
    regions = [{"region": "eu", "config": {"workflow": "rvlr"}}, {"region": "us", "config": {"max_new_tokens": 8}}]
    (problem,) = check_run_config(run(regions=regions))
    assert problem.startswith("models[0].regions[0].config.workflow: unknown workflow 'rvlr'")


def test_the_eval_scores_with_the_pools_reward_and_is_checked_with_it(tmp_path: Path) -> None:
    rows = tmp_path / "poems.jsonl"
    rows.write_text(json.dumps({"prompt": "a poem", "answer": "", "task_type": "poetry"}) + "\n")
    dataset = {"type": "file", "path": str(rows)}
    config = run(eval={"dataset": dataset})
    assert check_run_config(config) == [
        "models[0].eval.dataset: no reward for task_type 'poetry' (known: code, math, reasoning_gym, repo_tests, "
        "repo_tests_partial): set `reward` in the rollout config (a shipped name, 'package.module:attr' or a name "
        "registered in 'lakeflow.rewards'), "
        "or give the dataset's rows a task_type that has one"
    ]
    config = run({"reward": "math"}, eval={"dataset": dataset})
    assert check_run_config(config) == []
    assert eval_specs(config)[0].config["reward"] == "math"  # the eval process gets the pool's reward


def test_an_agent_pool_s_eval_plays_its_environment_and_is_checked_without_a_reward_function(tmp_path: Path) -> None:
    rows = tmp_path / "products.jsonl"
    rows.write_text(json.dumps({"prompt": "What is 2 * 3?", "answer": "6", "task_type": "agent:calculator"}) + "\n")
    pool = {"workflow": "agent", "environment": {"name": "calculator", "max_turns": 3}}
    config = run(pool, eval={"dataset": {"type": "file", "path": str(rows)}})
    assert check_run_config(config) == []  # the environment scores its episodes: no reward for 'agent' needed
    section = eval_specs(config)[0].config
    assert section["environment"]["name"] == "calculator" and section["agent"] is None


def test_a_dataset_file_that_cannot_be_read_is_a_problem_at_start(tmp_path: Path) -> None:
    broken = tmp_path / "broken.jsonl"
    broken.write_text("{not json\n")
    (problem,) = check_run_config(run(dataflow={"vocab_size": 512, "dataset": {"type": "file", "path": str(broken)}}))
    assert problem.startswith(f"models[0].dataflow.dataset: cannot read dataset {broken}")


def smol_model(path: Path) -> str:
    """A model directory whose chat template (SmolLM2's) ignores `tools=`; an empty weights file stands in
    for its weights (the checks look for one; nothing loads it)."""
    from tests.models.test_chat import SMOL

    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"vocab_size": 512, "max_position_embeddings": 512}))
    (path / "tokenizer_config.json").write_text(json.dumps({"chat_template": SMOL, "eos_token": "<|im_end|>"}))
    (path / "model.safetensors").write_bytes(b"")
    return str(path)


AGENT = {"workflow": "agent", "environment": {"name": "lookup"}}


def test_a_tool_using_pool_whose_template_drops_the_tools_is_warned_of(tmp_path: Path) -> None:
    from lakeflow.run.check import check_run_tools

    ref = smol_model(tmp_path / "smol")
    regions = [{"region": "eu", "config": {"chat_template": "chatml-tools"}}, {"region": "us", "config": {}}]
    config = run(AGENT, trainer={"model": ref}, regions=regions)
    assert check_run_config(config) == []  # a warning, not a problem
    assert check_run_tools(config) == [
        f"models[0].raas.config.chat_template: the chat template of {ref!r} drops the tools (environment 'lookup' "
        "has 1 tool): the model never sees them; set chat_template: chatml-tools or a template that renders tools"
    ]  # the eu region renders with chatml-tools; the us region is the home pool's config
    assert check_run_tools(run({**AGENT, "chat_template": "chatml-tools"}, trainer={"model": ref})) == []
    assert check_run_tools(run(AGENT)) == []  # the tiny model's template renders tools


def test_warm_up_demonstrations_whose_tools_are_not_the_environment_s_are_warned_of(tmp_path: Path) -> None:
    from lakeflow.raas.agent.envs.calculator import make_demos
    from lakeflow.run.check import check_run_tools

    demos = make_demos(2, seed=0)
    pool = {"workflow": "agent", "environment": {"name": "calculator"}, "chat_template": "chatml-tools"}
    as_given, sorted_keys = tmp_path / "given.jsonl", tmp_path / "sorted.jsonl"
    as_given.write_text("".join(json.dumps(d) + "\n" for d in demos))
    sorted_keys.write_text(json.dumps(demos[0]) + "\n" + json.dumps(demos[1], sort_keys=True) + "\n")
    assert check_run_tools(run(pool, trainer={"model": "tiny:x", "warmup": {"data": str(as_given)}})) == []
    (note,) = check_run_tools(run(pool, trainer={"model": "tiny:x", "warmup": {"data": str(sorted_keys)}}))
    assert note.startswith(
        "models[0].trainer.warmup.data: conversation 2's `tools` are not the schemas the pool's environment "
        "'calculator' gives its chat template (key order counts"
    )
    assert check_run_config(run(pool, trainer={"model": "tiny:x", "warmup": {"data": str(sorted_keys)}})) == []


def test_lakeflow_run_prints_the_warning_and_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from lakeflow.cli.run import load_job

    ref = smol_model(tmp_path / "smol")
    model = {"id": "policy", "dataflow": {"dataset": {"type": "synthetic"}}, "trainer": {"model": ref}}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"name": "c", "steps": 1, "models": [{**model, "raas": {"config": AGENT}}]}))
    config = load_job(str(path), None)  # returns the config: the run goes on
    assert config.models[0].raas.config.workflow == "agent"
    assert capsys.readouterr().err == (
        f"Warning: models[0].raas.config.chat_template: the chat template of {ref!r} drops the tools (environment "
        "'lookup' has 1 tool): the model never sees them; set chat_template: chatml-tools or a template that "
        "renders tools\n"
    )


def test_a_template_file_is_found_beside_the_config_and_reaches_the_eval(tmp_path: Path) -> None:
    from tests.models.test_chat import SMOL

    (tmp_path / "mine.jinja").write_text(SMOL)
    bare = tmp_path / "bare"  # a base model: no template of its own, so the configured one must serve
    bare.mkdir()
    (bare / "config.json").write_text(json.dumps({"vocab_size": 512}))
    model = {
        "id": "policy",
        "dataflow": {"dataset": {"type": "synthetic"}},
        "trainer": {"model": str(bare)},
        "raas": {"config": {"chat_template": "mine.jinja"}},
        "regions": [{"region": "eu", "config": {"chat_template": "mine.jinja"}}],
        "eval": {"dataset": {"type": "synthetic"}},
    }
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps({"name": "c", "steps": 1, "models": [model]}))
    config = load_run_config(path)
    mine = str(tmp_path / "mine.jinja")
    assert config.models[0].raas.config.chat_template == mine and config.models[0].regions[0].config == {
        "chat_template": mine
    }
    assert eval_specs(config)[0].config["chat_template"] == mine  # the eval renders as the pool does
    assert check_run_config(config) == []
    unset = run(trainer={"model": str(bare)}, eval={"dataset": {"type": "synthetic"}})
    assert [p.split(":")[0] for p in check_run_config(unset)] == ["models[0].trainer.model"]  # no template at all
    (tmp_path / "chatml-tools").write_text(SMOL)  # a shipped name is never taken for a file beside the config
    model["raas"] = {"config": {"chat_template": "chatml-tools"}}
    path.write_text(json.dumps({"name": "c", "steps": 1, "models": [model]}))
    assert load_run_config(path).models[0].raas.config.chat_template == "chatml-tools"


@pytest.mark.parametrize("host", ["bfloat16", "float32"])
def test_a_trainer_that_computes_in_float32_and_publishes_bfloat16_is_warned_of(
    tmp_path: Path, host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine would sample rounded weights the trainer never scores; `fastest` is read for this host."""
    from lakeflow.run import check
    from lakeflow.trainer import config as trainer_config

    monkeypatch.setattr(check, "fastest_autocast", lambda device: "bfloat16" if host == "bfloat16" else None)
    monkeypatch.setattr(trainer_config, "fastest_dtype", lambda device: host)
    ref = smol_model(tmp_path / "smol")
    config_json = tmp_path / "smol" / "config.json"
    config_json.write_text(json.dumps({**json.loads(config_json.read_text()), "dtype": "bfloat16"}))

    def notes(**trainer: Any) -> list[str]:
        return check.check_run_precision(run(trainer={"model": ref, **trainer}))

    warned = [
        "models[0].trainer.publish_dtype: the trainer computes in float32 but publishes bfloat16, so the engine "
        "samples rounded weights the trainer never scores and the two drift apart with every version: set "
        "publish_dtype: float32 (or fastest, with autocast: fastest), or autocast: bfloat16"
    ]
    assert notes() == warned  # the model's own bfloat16, computed in float32
    assert notes(autocast="bfloat16") == notes(publish_dtype="float32") == []
    assert notes(autocast="fastest") == ([] if host == "bfloat16" else warned)
    assert notes(autocast="fastest", publish_dtype="fastest") == []  # both follow the host
    assert notes(publish_dtype="fastest") == (warned if host == "bfloat16" else [])
    assert check.check_run_precision(run()) == []  # the tiny model is float32


def test_an_engine_that_computes_narrower_than_a_float32_trainer_is_warned_of() -> None:
    """A bf16 engine beside a trainer computing in float32 samples rounded weights (the mismatch table grew from
    0.03 to 0.2 nats per token after one version on SmolLM2, docs/trainer.md); a bf16 trainer is fine."""
    from lakeflow.run import check

    def notes(engine: dict[str, Any], **trainer: Any) -> list[str]:
        return check.check_run_precision(run({"engine": engine}, trainer={"model": "tiny:x", **trainer}))

    warned = (
        "models[0].raas.config.engine.dtype: the engine computes in bfloat16 but the trainer in float32, so the "
        "engine samples rounded weights the trainer never scores and the two drift apart with every version (the "
        "mismatch table shows it): set the engine's dtype to float32, or the trainer's autocast to bfloat16 (or "
        "fastest)"
    )
    assert notes({"type": "hf", "dtype": "bfloat16"}) == [warned]
    assert notes({"type": "vllm", "dtype": "bfloat16"}) == [warned]
    assert notes({"type": "hf", "dtype": "bfloat16"}, autocast="bfloat16") == []
    assert notes({"type": "hf", "dtype": "float32"}) == notes({"type": "vllm"}) == []


def test_a_lora_trainer_is_checked_against_the_engine_that_serves_its_adapters() -> None:
    lora = {"model": "tiny:x", "lora": {"rank": 16}}
    (problem,) = check_run_config(run({"engine": {"type": "vllm", "max_lora_rank": 8}}, trainer=lora))
    assert problem.startswith("models[0].raas.config.engine.max_lora_rank: 8 is below the trainer's lora.rank 16")
    assert check_run_config(run({"engine": {"type": "vllm", "max_lora_rank": 16}}, trainer=lora)) == []


def test_lora_targets_are_checked_against_the_models_files_before_a_run(tmp_path: Path) -> None:
    import json

    import numpy as np

    from lakeflow.run.check import check_run_here
    from lakeflow.weights.tensors import raw_tensor, write_safetensors

    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 8}))
    names = ["model.embed_tokens", "model.layers.0.self_attn.q_proj", "model.layers.0.mlp.up_proj", "lm_head"]
    state = {f"{n}.weight": raw_tensor("F32", (2, 2), np.zeros(4, np.float32)) for n in names}
    state["model.norm.weight"] = raw_tensor("F32", (2,), np.zeros(2, np.float32))
    write_safetensors(str(tmp_path / "model.safetensors"), state)
    here = run({}, trainer={"model": str(tmp_path), "lora": {"targets": ["q_proj", "qkv"]}})
    problems = [p for p in check_run_here(here) if "lora" in p]
    modules = "lm_head, q_proj, up_proj"  # the 2-D weights but the embedding's
    assert problems == [
        f"models[0].trainer.lora.targets: qkv is no module of {tmp_path}; its Linear modules are: {modules}"
    ]
