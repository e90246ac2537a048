"""The pool benchmarks' paced engine: the transformers engine pausing per decoding step, plugged in as a factory."""

from __future__ import annotations

import pytest

from benchmarks.paced import FACTORY, PacedEngine, paced_config
from lakeflow.models import resolve_model
from lakeflow.raas.config import FactoryEngineConfig, HFEngineConfig
from lakeflow.raas.engines import HFEngine, build_engine


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> HFEngine:
    pytest.importorskip("torch")
    e = HFEngine(HFEngineConfig(), seed=0)
    e.load(resolve_model("tiny:raas-test", tmp_path_factory.mktemp("models")))
    return e


def test_pace_pauses_per_decoding_step_of_each_prompt(engine: HFEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """The benchmarks' stand-in for an accelerator's latency: one pause per prompt, as long as its longest
    completion times the pace (a batch decodes its samples together)."""
    pauses: list[float] = []
    monkeypatch.setattr("benchmarks.paced.time.sleep", pauses.append)
    prompt = engine.encode_chat([{"role": "user", "content": "What is 1 + 2 * 3?"}])
    paced = PacedEngine(HFEngineConfig(), pace_s_per_token=0.5, seed=0)
    paced.model, paced.tokenizer, paced.max_model_len = engine.model, engine.tokenizer, engine.max_model_len
    paced._stop_ids = engine._stop_ids
    out = paced.generate([prompt, prompt[:-3]], n=3, max_tokens=4, temperature=1.0)
    assert pauses == [0.5 * max(len(c.token_ids) for c in group) for group in out]
    pauses.clear()
    engine.generate([prompt], n=2, max_tokens=4, temperature=1.0)
    assert pauses == []  # no pace, no pause


def test_the_paced_engine_is_built_from_its_factory_config() -> None:
    pytest.importorskip("torch")
    config = paced_config(HFEngineConfig(threads=1), 0.05)
    assert config == FactoryEngineConfig(
        factory=FACTORY, options={"device": "cpu", "dtype": "float32", "threads": 1, "pace_s_per_token": 0.05}
    )
    engine = build_engine(config, seed=0)
    assert isinstance(engine, PacedEngine) and engine.pace_s_per_token == 0.05 and engine.config.threads == 1
    with pytest.raises(ValueError, match="pace_s_per_token"):
        PacedEngine(HFEngineConfig(), pace_s_per_token=11)
