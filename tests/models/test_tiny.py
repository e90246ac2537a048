"""The locally built tiny model: a real Hugging Face directory that transformers loads and runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lakeflow.models import resolve_model
from lakeflow.models.tiny import LOOKUP_CALL

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def test_tiny_model_is_built_once_and_generates(tmp_path: Path) -> None:
    path = resolve_model("tiny:t", tmp_path)
    assert (Path(path) / "model.safetensors").exists() and (Path(path) / "tokenizer.json").exists()
    mtime = (Path(path) / "model.safetensors").stat().st_mtime_ns
    assert resolve_model("tiny:t", tmp_path) == path  # cached: not rebuilt
    assert (Path(path) / "model.safetensors").stat().st_mtime_ns == mtime
    model = transformers.AutoModelForCausalLM.from_pretrained(path)
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    assert model.config.head_dim == 64 and len(tokenizer) == model.config.vocab_size == 512
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2 + 3 * 4?"}], add_generation_prompt=True)
    ids = ids if isinstance(ids, list) else ids["input_ids"]
    assert tokenizer.decode(ids).endswith("<|im_start|>assistant\n")
    out = model.generate(torch.tensor([ids]), max_new_tokens=4, do_sample=False)
    assert out.shape == (1, len(ids) + 4) and int(out.max()) < 512


def test_other_references_pass_through() -> None:
    assert resolve_model("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"  # a hub id, for users who can
    assert resolve_model("/models/mine") == "/models/mine"


OLD_TEMPLATE = (  # the template before tools: every conversation without tools renders exactly as it did
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return transformers.AutoTokenizer.from_pretrained(resolve_model("tiny:tools", tmp_path_factory.mktemp("m")))


def test_the_chat_template_renders_tools_and_calls_and_nothing_else_changed(tokenizer: Any) -> None:
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 3 * 4?"}]
    for messages in (chat, chat[1:], [*chat, {"role": "assistant", "content": "14"}]):
        new = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert new == tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, chat_template=OLD_TEMPLATE
        )
    lookup = {"name": "lookup", "description": "Return the value.", "parameters": {"type": "object", "properties": {}}}
    called = {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "lookup", "arguments": {}}}]}
    text = tokenizer.apply_chat_template(
        [*chat, called, {"role": "tool", "content": "7"}],
        tools=[{"type": "function", "function": lookup}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert text == (
        f"<|im_start|>system\nBe brief.\n<tools>\n{json.dumps(lookup)}\n</tools><|im_end|>\n"
        "<|im_start|>user\nWhat is 2 + 3 * 4?<|im_end|>\n"
        f"<|im_start|>assistant\n{LOOKUP_CALL}<|im_end|>\n<|im_start|>tool\n7<|im_end|>\n<|im_start|>assistant\n"
    )
    string_arguments = {"function": {"name": "search", "arguments": '{"query": "x"}'}}
    text = tokenizer.apply_chat_template(
        [{"role": "assistant", "content": "ok", "tool_calls": [string_arguments]}], tokenize=False
    )
    assert (
        text
        == '<|im_start|>assistant\nok<tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call><|im_end|>\n'
    )


def test_tool_call_markup_is_whole_tokens_that_decoding_keeps(tokenizer: Any) -> None:
    assert len(tokenizer) == 512
    [lookup] = tokenizer(LOOKUP_CALL, add_special_tokens=False)["input_ids"]
    other = tokenizer('<tool_call>{"name": "f", "arguments": {}}</tool_call>', add_special_tokens=False)["input_ids"]
    ids = {tokenizer.convert_tokens_to_ids(t) for t in ("<tool_call>", "</tool_call>")}
    assert {other[0], other[-1]} == ids and ids | {lookup} == {509, 510, 511}
    assert tokenizer.decode([lookup, tokenizer.eos_token_id], skip_special_tokens=True) == LOOKUP_CALL
