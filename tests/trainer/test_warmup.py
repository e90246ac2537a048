"""The warm-up: demonstrations read and rendered turn by turn (assistant tokens trained, nothing else), and a
trainer that trains on them before it publishes version 0, once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from lakeflow.errors import ConfigError
from lakeflow.io import open_store
from lakeflow.models.chat import shipped_template
from lakeflow.trainer import Trainer, load_config
from lakeflow.trainer.check import check_trainer_config
from lakeflow.trainer.demos import conversation_tokens, read_conversations, tokenizer_render
from lakeflow.trainer.model import to_state
from lakeflow.weights import list_versions
from tests.trainer.helpers import MODEL, tokenizer, write_config, write_in_process_config

LOOKUP = {"type": "function", "function": {"name": "lookup", "description": "Return the value.", "parameters": {}}}
CALL = {"type": "function", "function": {"name": "lookup", "arguments": {}}, "id": "c1"}
DEMO = {
    "tools": [LOOKUP],
    "messages": [
        {"role": "user", "content": "Value?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "content": "4", "tool_call_id": "c1"},
        {"role": "assistant", "content": "4"},
    ],
}


def write_demos(path: Path, rows: list[Any]) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def test_only_the_assistant_turns_and_their_end_of_turn_are_trained(tiny_dir: str) -> None:
    tok = tokenizer(tiny_dir)
    render = tokenizer_render(tok, DEMO["tools"], shipped_template("chatml-tools"))
    ids, mask = conversation_tokens(render, DEMO["messages"])
    assert ids == render(DEMO["messages"], False)  # the whole conversation, as the template renders it
    trained = [tok.decode([t]) for t, m in zip(ids, mask, strict=True) if m]
    assert "".join(trained) == (
        '<tool_call>\n{"name": "lookup", "arguments": {}}\n</tool_call><|im_end|>' + "4<|im_end|>"
    )
    first_turn = render(DEMO["messages"][:1], True)
    assert not any(mask[: len(first_turn)])  # the prompt and the generation prompt are context


def test_a_template_that_rewrites_earlier_turns_is_refused_with_the_reason(tiny_dir: str) -> None:
    rewriting = "{{ messages | length }}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    render = tokenizer_render(tokenizer(tiny_dir), None, rewriting)
    with pytest.raises(ConfigError, match="rewrites earlier turns at message 1"):
        conversation_tokens(render, DEMO["messages"])


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{not json", r"demos.jsonl:2: not JSON"),
        (json.dumps({"messages": []}), r"demos.jsonl:2: not \{\"messages\""),
        (json.dumps({"messages": [{"role": "user", "content": "hi"}]}), "demos.jsonl:2: no assistant message"),
        (json.dumps({"messages": [{"role": "robot"}]}), "demos.jsonl:2: message 0 has no role"),
        (json.dumps({**DEMO, "tools": "lookup"}), "demos.jsonl:2: `tools` is not a list"),
    ],
)
def test_a_bad_line_is_named_by_file_and_number(tmp_path: Path, line: str, reason: str) -> None:
    path = write_demos(tmp_path / "demos.jsonl", [DEMO, line])
    with pytest.raises(ConfigError, match=reason):
        read_conversations(path)


def test_the_check_reads_the_demonstrations_and_the_template(tmp_path: Path, tiny_cache: str) -> None:
    good = write_demos(tmp_path / "demos.jsonl", [DEMO])
    config = load_config(write_config(tmp_path / "c.yaml", tiny_cache, warmup={"data": good}))
    assert check_trainer_config(config) == []
    config = load_config(
        write_config(
            tmp_path / "c.yaml", tiny_cache, warmup={"data": str(tmp_path / "gone.jsonl"), "chat_template": "x"}
        )
    )
    problems = check_trainer_config(config, "models[0].trainer")
    assert len(problems) == 2
    assert problems[0].startswith("models[0].trainer.warmup.data: cannot read")
    assert problems[1].startswith("models[0].trainer.warmup.chat_template: 'x' is neither a shipped template")


def assistant_logprob(model: Any, ids: list[int], mask: list[int]) -> float:
    """Mean log-probability of the trained tokens of one conversation under `model`."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1].float()
    logp = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    trained = torch.tensor(mask[1:], dtype=torch.bool)
    return float(logp[trained].mean())


def test_version_0_is_the_warmed_model_and_a_restart_does_not_warm_again(
    tmp_path: Path, tiny_cache: str, tiny_dir: str
) -> None:
    from transformers import AutoModelForCausalLM

    demos = write_demos(tmp_path / "demos.jsonl", [DEMO])
    warmup = {"data": demos, "steps": 20, "batch_size": 2, "lr": 3e-3, "chat_template": "chatml-tools"}
    # published in bf16 over float32 master weights: a restart at version 0 must find the warmed master weights
    path = tmp_path / "c.yaml"
    config = load_config(write_in_process_config(path, tiny_cache, warmup=warmup, publish_dtype="bfloat16"))
    store = open_store(str(tmp_path / "lake"))
    trainer = Trainer(store, MODEL, config, str(tmp_path / "work"))
    assert trainer.start() == 0
    trainer.close()
    assert list_versions(store, MODEL) == [0]

    tok = tokenizer(tiny_dir)
    ids, mask = conversation_tokens(
        tokenizer_render(tok, DEMO["tools"], shipped_template("chatml-tools")), DEMO["messages"]
    )
    base = AutoModelForCausalLM.from_pretrained(tiny_dir)
    before, after = assistant_logprob(base, ids, mask), assistant_logprob(trainer.model, ids, mask)
    assert after > before + 1.0, (before, after)  # the demonstration became likely

    again = Trainer(store, MODEL, config, str(tmp_path / "again"))  # version 0 exists: resumed, not warmed, and
    # its checkpoint still holds the warmed float32 weights (a resume once overwrote them with the bf16 ones)
    assert again.start() == 0
    again.close()
    published, warmed = to_state(again.model), to_state(trainer.model)
    assert all(np.array_equal(published[n].bits, warmed[n].bits) for n in warmed)


def test_a_run_config_finds_the_demonstrations_beside_it_and_gives_the_pools_template(tmp_path: Path) -> None:
    from lakeflow.run import load_run_config

    write_demos(tmp_path / "demos.jsonl", [DEMO])
    model = {
        "id": "policy",
        "dataflow": {"vocab_size": 512, "dataset": {"type": "synthetic"}},
        "trainer": {"model": "tiny:x", "warmup": {"data": "demos.jsonl"}},
        "raas": {"config": {"chat_template": "chatml-tools"}},
    }
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps({"name": "w", "steps": 1, "models": [model]}))
    warmup = load_run_config(path).models[0].trainer.warmup
    assert warmup is not None
    assert warmup.data == str(tmp_path / "demos.jsonl") and warmup.chat_template == "chatml-tools"
