"""The vLLM engine on the tiny model: sampled logprobs match a transformers forward pass, a swapped-in
weights directory is picked up by `load`, multi-turn episodes continued from token ids are scored by the
trainer as vLLM sampled them (token-in, token-out), and adapter versions are served as LoRA. Skipped where
vLLM is not installed."""

from __future__ import annotations

import gc
import os
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")
torch = pytest.importorskip("torch")

from lakeflow.models import resolve_model  # noqa: E402
from lakeflow.raas.config import HFEngineConfig, VLLMEngineConfig  # noqa: E402
from lakeflow.raas.config.environment import EnvironmentConfig  # noqa: E402
from lakeflow.raas.engines import Completion, build_engine, set_chat_template  # noqa: E402
from lakeflow.raas.episodes.workflow import agent  # noqa: E402
from lakeflow.raas.trajectory import POLICY, Sampling  # noqa: E402
from tests.raas.agent.helpers import (  # noqa: E402
    check_trainer_reproduces,
    make_task,
    play_across_versions,
    switched_mid_turn,
)

# vLLM and torch's inductor warn at import and start-up (deprecations, resource warnings of their workers).
pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]


@pytest.fixture(autouse=True, scope="module")
def _collect_vllm_leftovers() -> Iterator[None]:
    """vLLM leaves objects (a zmq context) that warn when garbage-collected: collect them here, where
    the warning is expected, rather than in whichever later test the collector happens to run."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


T = 0.7
T_AGENT = 0.8  # the multi-turn episodes' temperature
# Measured on fp32 CPU: max |vLLM - transformers| 9.5e-7 (initial weights), 9.5e-6 (perturbed); 1e-4 leaves headroom.
TOL = 1e-4


def _reference_logprobs(model_dir: str, completion: Completion, temperature: float) -> list[float]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = completion.prompt_ids + completion.token_ids
    with torch.inference_mode():
        logits = model(torch.tensor([ids])).logits[0].float()
    start = len(completion.prompt_ids) - 1
    steps = logits[start : start + len(completion.token_ids)]
    lp = torch.log_softmax(steps / temperature, dim=-1)
    return lp.gather(-1, torch.tensor(completion.token_ids).unsqueeze(-1)).squeeze(-1).tolist()


def _top_tokens(model_dir: str, completion: Completion) -> list[int]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.inference_mode():
        logits = model(torch.tensor([completion.prompt_ids + completion.token_ids])).logits[0]
    start = len(completion.prompt_ids) - 1
    return [int(t) for t in logits[start : start + len(completion.token_ids)].argmax(-1)]


def _swap_in_perturbed(model_dir: Path) -> None:
    """Replace the directory atomically (as a weight-store pull does) with one holding perturbed weights."""
    from safetensors.torch import load_file, save_file

    new = model_dir.with_name(model_dir.name + ".new")
    shutil.copytree(model_dir, new)
    state = load_file(str(new / "model.safetensors"))
    gen = torch.Generator().manual_seed(1)
    state = {k: (v + 0.2 * torch.randn(v.shape, generator=gen)).contiguous() for k, v in state.items()}
    save_file(state, str(new / "model.safetensors"), metadata={"format": "pt"})
    aside = model_dir.with_name(model_dir.name + ".old")
    os.rename(model_dir, aside)
    os.rename(new, model_dir)
    shutil.rmtree(aside)


def _max_error(model_dir: str, groups: list[list[Completion]]) -> float:
    worst = 0.0
    for group in groups:
        for c in group:
            ref = _reference_logprobs(model_dir, c, T)
            worst = max(worst, max(abs(a - b) for a, b in zip(c.logprobs, ref, strict=True)))
    return worst


@pytest.mark.usefixtures("untraced_engine_process")
def test_vllm_samples_reloads_continues_episodes_from_ids_and_serves_lora_adapters(
    tmp_path: Path, tiny_dir: str, tiny_v1_dir: str
) -> None:
    """One vLLM start (the suite's dearest seconds) for three checks: sampling and reloading, multi-turn episodes
    from token ids, then adapter versions as LoRA (every tiny model has the same shapes: a reload switches
    models; an engine with LoRA on samples the bare base as one without)."""
    pytest.importorskip("peft")
    engine = build_engine(VLLMEngineConfig(max_model_len=512, enforce_eager=True, max_lora_rank=8), seed=0)
    try:
        _sampling_and_reloads(engine, tmp_path)
        _multi_turn_tokens_match_the_trainer(engine, tiny_dir, tiny_v1_dir)
        _adapters_served_as_lora(engine, tmp_path / "lora")
    finally:
        engine.close()  # type: ignore[attr-defined]


def _sampling_and_reloads(engine: Any, tmp_path: Path) -> None:
    """Tempered logprobs as a transformers forward gives them, chat templates per call, a judge's choice
    logprobs, a teacher's token logprobs, a swapped weights directory picked up by `load`, greedy decoding."""
    model_dir = resolve_model("tiny:vllm", tmp_path)
    engine.load(model_dir)
    assert engine.max_model_len == 512
    # chat_template: vLLM renders in pooled copies of its tokenizer, so it goes to every call
    question = [{"role": "user", "content": "Value?"}]
    lookup = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    set_chat_template(engine, "chatml-tools")
    assert "# Tools" in engine.tokenizer.decode(engine.encode_chat(question, True, [lookup]))
    engine.use_chat_template(None)
    assert "# Tools" not in engine.tokenizer.decode(engine.encode_chat(question, True, [lookup]))
    prompts = [
        [{"role": "user", "content": "What is 3 + 4 * 5?"}],
        engine.encode_chat([{"role": "user", "content": "The answer is"}]),
    ]
    groups = engine.generate(prompts, n=4, max_tokens=24, temperature=T)
    assert len(groups) == 2 and all(len(g) == 4 for g in groups)
    stop_id = engine.tokenizer.convert_tokens_to_ids("<|im_end|>")
    for prompt, group in zip(prompts, groups, strict=True):
        for c in group:
            assert c.prompt_ids == (prompt if isinstance(prompt[0], int) else engine.encode_chat(prompt))
            assert 1 <= len(c.token_ids) == len(c.logprobs) <= 24
            assert all(lp <= 0.0 for lp in c.logprobs)
            if c.finish_reason == "stop":
                assert c.token_ids[-1] == stop_id
            else:
                assert c.finish_reason == "length" and len(c.token_ids) == 24
            assert c.text == engine.decode(c.token_ids)
    error = _max_error(model_dir, groups)
    print(f"max |logprob error| before the reload: {error:.3g}")
    assert error < TOL

    # a judge's constrained verdict (`verdict: choice`): each choice's logprob as the transformers engine
    # gives it (tests/raas/test_judge_pool.py checks that one against a plain forward)
    asked = engine.encode_chat([{"role": "user", "content": "Is 7 right? Answer 0 or 1."}])
    choices = ["0", "1", "yes"]
    hf = build_engine(HFEngineConfig(), seed=0)
    hf.load(model_dir)
    expected = hf.choice_logprobs(asked, choices)
    got = engine.choice_logprobs(asked, choices)
    assert max(abs(a - b) for a, b in zip(got, expected, strict=True)) < TOL

    # a distillation teacher's score (`POST /v1/score`): each response token's logprob, as the
    # transformers engine gives it; vLLM's prompt logprobs come from raw logits: temperature 1 only
    rows = [(asked, c.token_ids) for c in groups[0][:2]]
    want = hf.token_logprobs(rows, 1.0)
    scored = engine.token_logprobs(rows, 1.0)
    assert [len(s) for s in scored] == [len(r) for _, r in rows]
    assert max(abs(a - b) for s, w in zip(scored, want, strict=True) for a, b in zip(s, w, strict=True)) < TOL
    with pytest.raises(ValueError, match="temperature 1 only"):
        engine.token_logprobs(rows, T)

    old_dir = tmp_path / "old-weights"
    shutil.copytree(model_dir, old_dir)
    _swap_in_perturbed(Path(model_dir))
    engine.load(model_dir)
    new_groups = engine.generate(prompts, n=4, max_tokens=24, temperature=T)
    error = _max_error(model_dir, new_groups)
    stale = _max_error(str(old_dir), new_groups)  # the old weights do not explain them: the reload took
    print(f"max |logprob error| after the reload: {error:.3g} (against the old weights: {stale:.3g})")
    assert error < TOL < stale

    # temperature 0 decodes greedily: the top token of the transformers forward at every step
    (greedy,) = engine.generate(prompts[:1], n=2, max_tokens=8, temperature=0.0)
    assert greedy[0].token_ids == greedy[1].token_ids
    reference = _reference_logprobs(model_dir, greedy[0], 1.0)
    top = _top_tokens(model_dir, greedy[0])
    assert (
        greedy[0].token_ids == top and max(abs(a - b) for a, b in zip(greedy[0].logprobs, reference, strict=True)) < TOL
    )


def _multi_turn_tokens_match_the_trainer(engine: Any, tiny_dir: str, tiny_v1_dir: str) -> None:
    """Token-in, token-out: multi-turn episodes continued from token ids, whose stored ids the trainer's
    forward scores as vLLM sampled them; then turns continued across an in-place weight reload in chunks, as
    `weights_update: interrupt` plays them: each token matches the version that sampled it."""
    engine.load(tiny_dir)
    config = EnvironmentConfig(name="tests.raas.agent.helpers:Chatter", args={"turns": 3})
    sampling = Sampling(max_tokens=12, temperature=T_AGENT)
    trajectories = agent(make_task(4), {POLICY: engine}, lambda *_: None, sampling, environment=config)
    across = play_across_versions(engine, tiny_v1_dir, sampling, chunk_tokens=5)
    assert len(trajectories) == 4 and all(t.extra["turns"] == 3 for t in trajectories)
    worst = check_trainer_reproduces(tiny_dir, trajectories, T_AGENT)
    print(f"max |trainer - vLLM| over sampled tokens of multi-turn episodes: {worst:.2e}")
    assert worst <= 1e-3
    assert any(switched_mid_turn(t) for t in across)
    worst = check_trainer_reproduces({0: tiny_dir, 1: tiny_v1_dir}, across, T_AGENT)
    print(f"max |trainer - vLLM| per token version, across an update mid-turn: {worst:.2e}")
    assert worst <= 1e-3


def _adapters_served_as_lora(engine: Any, tmp_path: Path) -> None:
    """The engine on a base serves each adapter version as a LoRA adapter, then (`lora_serving: merged`) merged
    into a copy of the base and reloaded in place: its sampled logprobs are those of the merged checkpoint,
    version after version (a full adapter, then an adapter delta), either way."""
    from lakeflow.io import open_store
    from lakeflow.models.merge import merge_adapter
    from lakeflow.raas.engines import load_version
    from lakeflow.weights import TransferOptions, pull
    from tests.raas.lora_helpers import publish_adapters

    tiny = resolve_model("tiny:vllm-lora", tmp_path / "models")
    store = open_store(str(tmp_path / "lake"))
    publish_adapters(store, "policy", tiny, versions=2)
    options = TransferOptions(progress=False)
    cache = str(tmp_path / "cache")
    load_version(engine, store, "policy", 0, cache, options)
    prompts = [[{"role": "user", "content": "What is 3 + 4 * 5?"}]]
    bare = engine.generate(prompts, n=4, max_tokens=16, temperature=T)
    assert _max_error(tiny, bare) < TOL
    for version, serving in ((1, "adapter"), (2, "adapter"), (1, "merged"), (2, "merged")):
        engine.config = engine.config.model_copy(update={"lora_serving": serving})
        started = engine.llm
        load_version(engine, store, "policy", version, cache, options)
        assert engine.llm is started  # LoRA was on from the start; a merged copy is reloaded in place
        assert os.path.isdir(os.path.join(cache, "policy-merged")) == (serving == "merged")
        groups = engine.generate(prompts, n=4, max_tokens=16, temperature=T)
        adapter = pull(store, "policy", str(tmp_path / f"adapter-{version}"), version, options).path
        merged = merge_adapter(tiny, adapter, str(tmp_path / f"merged-{version}-{serving}"))
        error, unmerged = _max_error(merged, groups), _max_error(tiny, groups)
        print(f"version {version} ({serving}): max |logprob error| {error:.3g} (the bare base: {unmerged:.3g})")
        assert error < TOL < unmerged
