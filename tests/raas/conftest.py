"""Rollout-service fixtures: the tiny model built once per session, a lake with it published as version 0."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lakeflow.io import Store
from lakeflow.models import resolve_model
from lakeflow.weights import State, publish, raw_tensor, read_source


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A local Hugging Face directory: the ~164k-parameter Qwen2 and its tokenizer."""
    return resolve_model("tiny:raas-test", tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def tiny_v1_dir(tiny_dir: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The tiny model with noise on every weight, same config: a newer version engines reload in place."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    out = tmp_path_factory.mktemp("tiny-v1")
    shutil.copytree(tiny_dir, out, dirs_exist_ok=True)
    generator = torch.Generator().manual_seed(1)
    for path in out.glob("*.safetensors"):
        state = load_file(path)
        noisy = {k: v + 0.05 * torch.randn(v.shape, generator=generator).to(v.dtype) for k, v in state.items()}
        save_file(noisy, path, metadata={"format": "pt"})
    return str(out)


def publish_dir(store: Store, model_id: str, path: str) -> State:
    """What `lakeflow weights publish --model M PATH` does; returns the published state."""
    state, files = read_source(path)
    publish(store, model_id, state, files=files or None, publisher="test")
    return state


def perturbed(state: State, seed: int = 1, scale: float = 0.05) -> State:
    """Every float32 tensor plus small noise: a trainer step's worth of new weights."""
    rng = np.random.default_rng(seed)
    out: State = {}
    for name, t in state.items():
        values = t.bits.view(np.float32)
        new = (values + rng.normal(0, scale, values.shape)).astype(np.float32)
        out[name] = raw_tensor(t.dtype, t.shape, new)
    return out


@pytest.fixture
def lake(tmp_path: Path, tiny_dir: str) -> tuple[Store, State]:
    """A local lake whose model 'policy' has the tiny model published as version 0."""
    from lakeflow.io import open_store

    store = open_store(str(tmp_path / "lake"))
    return store, publish_dir(store, "policy", tiny_dir)


@pytest.fixture(scope="session")
def tok(tiny_dir: str) -> Any:
    """The tiny model's tokenizer (the scripted engines of the workflow tests sample through it)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)


@pytest.fixture(scope="session")
def engine(tiny_dir: str) -> Any:
    """HFEngine on the tiny model, for smoke runs (its output is garbage)."""
    from lakeflow.raas.config import HFEngineConfig
    from lakeflow.raas.engines import HFEngine

    e = HFEngine(HFEngineConfig(), seed=0)
    e.load(tiny_dir)
    return e


@pytest.fixture
def untraced_engine_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start vLLM's engine process without coverage's tracer: it runs vLLM's code (the one lakeflow
    function it calls, the weights reload, is measured through `lakeflow run` with vLLM,
    tests/run/test_run.py), and traced it starts and generates about 1.8x slower on Python 3.11."""
    for name in [k for k in os.environ if k.startswith("COVERAGE_")]:
        monkeypatch.delenv(name)


@pytest.fixture
def judge_server() -> Iterator[Any]:
    """judge_server(reply=grader, port=0) -> a started stand-in judge (tests/raas/judge_server.py), stopped
    after the test."""
    from tests.raas.judge_helpers import grader
    from tests.raas.judge_server import JudgeServer

    made: list[JudgeServer] = []

    def start(reply: Any = grader, port: int = 0) -> JudgeServer:
        made.append(JudgeServer(reply, port))
        return made[-1]

    yield start
    for server in made:
        server.close()


@pytest.fixture
def judge_runner() -> Iterator[Any]:
    """judge_runner(engine, judge_config, sampling=None, batch_groups=1, max_chars=8192, stopping=None) -> a
    runner scored by the judge, closed after the test."""
    from lakeflow.raas.scoring.judge.client import Judge
    from lakeflow.raas.scoring.judge.judge_scorer import JudgeScorer
    from lakeflow.raas.scoring.runner import ScoredRunner
    from lakeflow.raas.trajectory import Sampling

    made: list[ScoredRunner] = []

    def build(
        engine: Any,
        config: Any,
        sampling: Any = None,
        batch_groups: int = 1,
        max_chars: int = 8192,
        stopping: Any = None,
    ) -> ScoredRunner:
        sampling = sampling or Sampling(64, 1.0)
        scorer = JudgeScorer(Judge(config), sampling, max_chars)
        runner = ScoredRunner(engine, scorer, sampling, batch_groups, stopping or (lambda: False))
        made.append(runner)
        return runner

    yield build
    for r in made:
        r.close()


@pytest.fixture(scope="session")
def reward_model_dir(tiny_dir: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny sequence-classification model (one output) with the tiny tokenizer, built once per session."""
    from tests.raas.reward_model_helpers import build_reward_model

    return build_reward_model(tmp_path_factory.mktemp("reward-model"), tiny_dir)
