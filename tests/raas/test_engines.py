"""The transformers engine: n samples with the behaviour logprobs a trainer's importance ratio needs."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from lakeflow.errors import MissingExtraError
from lakeflow.raas.config import HFEngineConfig, VLLMEngineConfig
from lakeflow.raas.engines import HFEngine, build_engine


@pytest.fixture(scope="module")
def engine(tiny_dir: str) -> HFEngine:
    e = HFEngine(HFEngineConfig(), seed=0)
    e.load(tiny_dir)
    return e


def forward_logprobs(model: torch.nn.Module, prompt: list[int], tokens: list[int], temperature: float) -> torch.Tensor:
    """What a trainer computes: one forward pass over prompt + completion, log softmax(logits / T)."""
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits / temperature, -1).gather(-1, torch.tensor(tokens)[:, None])[:, 0]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_match_a_separate_forward_pass(engine: HFEngine, temperature: float) -> None:
    messages = [{"role": "user", "content": "What is 3 + 4 * 5? Answer with the number only."}]
    (completions,) = engine.generate([messages], n=4, max_tokens=24, temperature=temperature)
    assert len(completions) == 4
    prompt = engine.encode_chat(messages)
    for c in completions:
        assert c.prompt_ids == prompt
        assert 1 <= len(c.token_ids) == len(c.logprobs) <= 24
        assert all(0 <= t < 512 for t in c.token_ids)
        assert all(lp <= 0 for lp in c.logprobs)
        expected = forward_logprobs(engine.model, prompt, c.token_ids, temperature)
        torch.testing.assert_close(torch.tensor(c.logprobs), expected, rtol=0, atol=1e-4)
        if c.finish_reason == "stop":
            assert c.token_ids[-1] == engine.tokenizer.eos_token_id
        else:
            assert c.finish_reason == "length" and len(c.token_ids) == 24
            assert engine.tokenizer.eos_token_id not in c.token_ids


def test_token_id_prompts_and_several_prompts(engine: HFEngine) -> None:
    a = engine.encode_chat([{"role": "user", "content": "What is 1 + 2 * 3?"}])
    b = a[:-3]
    out = engine.generate([a, b], n=2, max_tokens=5, temperature=1.0)
    assert [len(x) for x in out] == [2, 2]
    assert out[0][0].prompt_ids == a and out[1][1].prompt_ids == b
    assert out[0][0].text == engine.decode(out[0][0].token_ids)


def test_bad_arguments_are_refused(engine: HFEngine) -> None:
    with pytest.raises(ValueError, match="temperature"):
        engine.generate([[1, 2]], n=1, max_tokens=4, temperature=-1.0)
    with pytest.raises(ValueError, match="exceeds"):
        engine.generate([[1] * 500], n=1, max_tokens=64, temperature=1.0)


def test_temperature_zero_decodes_greedily(engine: HFEngine) -> None:
    prompt = engine.encode_chat([{"role": "user", "content": "What is 3 + 4?"}])
    (completions,) = engine.generate([prompt], n=2, max_tokens=6, temperature=0.0)
    assert completions[0].token_ids == completions[1].token_ids
    with torch.no_grad():
        logits = engine.model(torch.tensor([prompt + completions[0].token_ids])).logits[0, len(prompt) - 1 :]
    steps = len(completions[0].token_ids)
    assert completions[0].token_ids == logits[:steps].argmax(-1).tolist()  # the top token at every step
    expected = torch.log_softmax(logits[:steps].float(), -1).gather(-1, torch.tensor(completions[0].token_ids)[:, None])
    torch.testing.assert_close(torch.tensor(completions[0].logprobs), expected[:, 0], rtol=0, atol=1e-4)


def test_reloading_copies_new_weights_into_the_live_model(tiny_dir: str, tmp_path: str) -> None:
    from transformers import AutoModelForCausalLM

    e = HFEngine(seed=0)
    e.load(tiny_dir)
    model = e.model
    changed = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    with torch.no_grad():
        for p in changed.parameters():
            p.add_(0.01)
    changed.save_pretrained(tmp_path)
    e.tokenizer.save_pretrained(tmp_path)
    e.load(str(tmp_path))
    assert e.model is model  # in place: no second model built
    want = changed.state_dict()
    for name, value in e.model.state_dict().items():
        assert torch.equal(value, want[name]), name


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_vllm_without_vllm_names_the_extra() -> None:
    with pytest.raises(MissingExtraError, match=r"lakeflow\[vllm\]"):
        build_engine(VLLMEngineConfig())
