"""The GPU check's real-model run is the SmolLM2 recipe with this host's model and device: a run config that
`lakeflow run` accepts, vLLM sharing the GPU on the full plan, the transformers engine on the dry run."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from benchmarks.gpu.realmodel import RECIPE, TINY_REAL, RealPlan, repository_root, run_config
from lakeflow.run.check import check_run_config
from lakeflow.run.config import RunConfig


def recipe() -> dict[str, object]:
    return dict(yaml.safe_load((repository_root() / RECIPE).read_text()))


def test_the_full_plan_shares_the_gpu_between_two_vllm_engines_and_the_trainer(tmp_path: Path) -> None:
    model = tmp_path / "smollm2"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"vocab_size": 49152, "max_position_embeddings": 8192}))
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    plan = RealPlan()
    config = RunConfig.model_validate(run_config(recipe(), str(model), "cuda", plan, False, tmp_path))
    assert check_run_config(config) == []  # this machine's devices are not looked at: check_run_here's
    (m,) = config.models
    assert (config.steps, m.trainer.model, m.trainer.device) == (plan.steps, str(model), "cuda")
    assert m.dataflow_config().vocab_size == 49152  # read from the model
    engines = [m.raas.config.engine, m.eval.engine if m.eval else None]
    assert [(e.type, getattr(e, "gpu_memory_utilization", None)) for e in engines if e] == [
        ("vllm", plan.raas_gpu_share),
        ("vllm", plan.eval_gpu_share),
    ]
    assert m.eval is not None and m.eval.every == plan.eval_every


def test_the_dry_run_uses_the_tiny_model_on_the_transformers_engine(tmp_path: Path) -> None:
    config = RunConfig.model_validate(run_config(recipe(), "tiny:gpu-check", "cpu", TINY_REAL, True, tmp_path))
    assert check_run_config(config) == []
    (m,) = config.models
    assert m.raas.config.engine.type == "hf" and m.eval is not None and m.eval.engine is not None
    assert m.eval.engine.type == "hf" and m.trainer.model_cache_dir == str(tmp_path / "models")
