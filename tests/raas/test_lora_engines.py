"""LoRA adapter versions in the transformers engine: one served through peft on its base computes what the
merged checkpoint (`lakeflow weights merge`) computes; `weights ls`, `verify` and `gc` know adapter versions."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from lakeflow.cli.weights import weights as weights_cli
from lakeflow.io import open_store
from lakeflow.raas.engines import HFEngine, load_version
from lakeflow.weights import TransferOptions, list_versions, read_manifest
from tests.raas.lora_helpers import publish_adapters

pytest.importorskip("peft")


def test_hf_engine_serves_adapter_versions_as_the_merged_checkpoint_computes(tmp_path: Path, tiny_dir: str) -> None:
    lake = str(tmp_path / "lake")
    store = open_store(lake)
    publish_adapters(store, "policy", tiny_dir, versions=2)
    assert read_manifest(store, "policy", 2).shown_kind() == "adapter-delta"
    engine = HFEngine(seed=0)
    cache = str(tmp_path / "cache")
    load_version(engine, store, "policy", 0, cache, TransferOptions(progress=False))
    prompt = engine.encode_chat([{"role": "user", "content": "What is 12 + 30?"}])
    choices = ["42", "41", "12 + 30 = 42"]
    bare = engine.choice_logprobs(prompt, choices)
    served = {}
    for version in (1, 2):
        pulled = load_version(engine, store, "policy", version, cache, TransferOptions(progress=False))
        assert pulled.bytes_fetched < read_manifest(store, "policy", 0).state_bytes / 4  # the base is not fetched again
        served[version] = engine.choice_logprobs(prompt, choices)
        greedy = engine.generate([prompt], n=1, max_tokens=6, temperature=0)[0][0]
        out = tmp_path / f"merged-{version}"
        run = CliRunner().invoke(
            weights_cli, ["merge", "--lake", lake, "--model", "policy", "--version", str(version), "--out", str(out)]
        )
        assert run.exit_code == 0, run.output
        merged = HFEngine(seed=0)
        merged.load(str(out))
        assert merged.choice_logprobs(prompt, choices) == pytest.approx(served[version], abs=1e-4)
        assert merged.generate([prompt], n=1, max_tokens=6, temperature=0)[0][0].token_ids == greedy.token_ids
    assert served[1] != pytest.approx(bare, abs=1e-3) and served[2] != pytest.approx(served[1], abs=1e-3)
    load_version(engine, store, "policy", 0, cache, TransferOptions(progress=False))  # back to the bare base
    assert engine.choice_logprobs(prompt, choices) == pytest.approx(bare, abs=1e-5)

    runner = CliRunner()
    listing = runner.invoke(weights_cli, ["ls", "--lake", lake, "--model", "policy"])
    kinds = [line.split()[1] for line in listing.output.splitlines()[1:]]
    assert listing.exit_code == 0 and kinds == ["full", "adapter", "adapter-delta"], listing.output
    verify = runner.invoke(weights_cli, ["verify", "--lake", lake, "--model", "policy", "--version", "2"])
    assert verify.exit_code == 0 and "ok (rebuilt from [1, 2]" in verify.output, verify.output
    refused = runner.invoke(weights_cli, ["merge", "--lake", lake, "--model", "policy", "--version", "0", "--out", "x"])
    assert refused.exit_code == 1 and "not an adapter" in refused.output
    runner.invoke(weights_cli, ["gc", "--lake", lake, "--model", "policy", "--keep", "1", "--drop-base"])
    assert list_versions(store, "policy") == [0, 1, 2]  # the adapters' base and the chain stay


class NoAdapters:
    """A factory engine class without load_adapter (never built: the check looks at the class)."""

    def __init__(self, seed: int | None = None) -> None:
        self.max_model_len = 0


def test_engines_that_cannot_serve_the_trainers_adapters_are_refused() -> None:
    from lakeflow.raas.check import lora_engine_problems
    from lakeflow.raas.config import FactoryEngineConfig, HFEngineConfig, VLLMEngineConfig

    assert lora_engine_problems(HFEngineConfig(), 64, "e") == []
    assert lora_engine_problems(VLLMEngineConfig(max_lora_rank=16), 16, "e") == []
    (low,) = lora_engine_problems(VLLMEngineConfig(max_lora_rank=8), 16, "e")
    assert low.startswith("e.max_lora_rank: 8 is below the trainer's lora.rank 16")
    (high,) = lora_engine_problems(VLLMEngineConfig(), 1024, "e")
    assert "up to rank 512" in high
    assert lora_engine_problems(VLLMEngineConfig(max_lora_rank=8, lora_serving="merged"), 1024, "e") == []
    factory = FactoryEngineConfig(factory=f"{__name__}:NoAdapters")
    (none,) = lora_engine_problems(factory, 8, "e")
    assert none.startswith("e.factory: NoAdapters has no load_adapter")
