"""Chat templates: the shipped `chatml-tools`, the `chat_template:` setting, a model's templates read from its
files, and the check's rendering (jinja2 alone) agreeing with transformers'."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lakeflow.errors import ConfigError
from lakeflow.models.chat import (
    SHIPPED_TEMPLATES,
    chat_template_text,
    drops_tools,
    render_chat,
    shipped_template,
    template_setting_problem,
)
from lakeflow.models.info import ChatTemplates, read_chat_templates
from lakeflow.models.tiny import CHAT_TEMPLATE

# SmolLM2-Instruct's template (tokenizer_config.json): ChatML that ignores `tools=`.
SMOL = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
        },
    },
    {"type": "function", "function": {"name": "lookup", "description": "The value.", "parameters": {"type": "object"}}},
]
# A conversation as it grows: calls as OpenAI tool_calls (arguments a JSON string and an object) and as
# text (how lakeflow's episodes hold the model's turns), several tool results in a row, content parts.
CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 3 + 4? Then look up the value."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"type": "function", "function": {"name": "add", "arguments": '{"a": 3, "b": 4}'}},
            {"type": "function", "function": {"name": "lookup", "arguments": {}}},
        ],
    },
    {"role": "tool", "name": "add", "content": "7"},
    {"role": "tool", "name": "lookup", "content": "9"},
    {"role": "user", "content": "Go on."},
    {"role": "assistant", "content": 'Checking. <tool_call>{"name": "lookup", "arguments": {}}</tool_call>'},
    {"role": "tool", "name": "lookup", "content": "9"},
    {"role": "assistant", "content": [{"type": "text", "text": "7 and 9."}]},
]
CHATML_TOOLS = shipped_template("chatml-tools")


def test_chatml_tools_renders_tools_calls_and_results_the_hermes_way() -> None:
    text = render_chat(CHATML_TOOLS, CONVERSATION[:2], TOOLS)
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")  # the system message, then the tools
    assert "<tools>\n" + "\n".join(json.dumps(t["function"]) for t in TOOLS) + "\n</tools>" in text
    assert '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>' in text
    assert text.count("<|im_start|>system") == 1 and text.endswith(
        "<|im_start|>user\n" + CONVERSATION[1]["content"] + "<|im_end|>\n<|im_start|>assistant\n"
    )
    full = render_chat(CHATML_TOOLS, CONVERSATION, TOOLS, add_generation_prompt=False)
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "add", "arguments": {"a": 3, "b": 4}}\n</tool_call>\n'
        '<tool_call>\n{"name": "lookup", "arguments": {}}\n</tool_call><|im_end|>\n'
    ) in full  # a string's arguments as given, an object's as JSON
    assert "<|im_start|>tool\n<tool_response>\n7\n</tool_response><|im_end|>\n" in full
    assert full.endswith("<|im_start|>assistant\n7 and 9.<|im_end|>\n")
    plain = render_chat(CHATML_TOOLS, CONVERSATION[:2])  # without tools: plain ChatML
    assert plain == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n" + CONVERSATION[1]["content"] + (
        "<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize("tools", [TOOLS, None], ids=["tools", "no-tools"])
def test_chatml_tools_extends_a_growing_conversation_as_a_prefix(tools: list[dict[str, Any]] | None) -> None:
    """What token-in, token-out episodes rely on (lakeflow/raas/episodes/episode.py glue_tokens): every message
    appended, whatever its role, only adds text after the rendering of the conversation before it."""
    for k in range(1, len(CONVERSATION)):
        before, after = CONVERSATION[:k], CONVERSATION[: k + 1]
        closed = render_chat(CHATML_TOOLS, before, tools, add_generation_prompt=False)
        assert render_chat(CHATML_TOOLS, after, tools, add_generation_prompt=False).startswith(closed)
        assert render_chat(CHATML_TOOLS, after, tools).startswith(closed)
        if after[-1]["role"] == "assistant":  # the generation prompt opens the assistant's turn
            opened = render_chat(CHATML_TOOLS, before, tools, add_generation_prompt=True)
            assert render_chat(CHATML_TOOLS, after, tools, add_generation_prompt=False).startswith(opened)


@pytest.mark.parametrize("template", [CHATML_TOOLS, SMOL, CHAT_TEMPLATE], ids=["chatml-tools", "smollm2", "tiny"])
def test_the_checks_rendering_is_transformers_rendering(template: str) -> None:
    from transformers.utils.chat_template_utils import render_jinja_template

    conversations = [CONVERSATION[:2], CONVERSATION] if template != SMOL else [CONVERSATION[:2]]
    for messages in conversations:
        for tools in (TOOLS, None):
            ours = render_chat(template, messages, tools, True, {"eos_token": "<|im_end|>"})
            (theirs,), _ = render_jinja_template(
                [messages], tools=tools, chat_template=template, add_generation_prompt=True, eos_token="<|im_end|>"
            )
            assert ours == theirs


def test_drops_tools_tells_a_template_that_ignores_them() -> None:
    assert drops_tools(ChatTemplates({"default": SMOL}), TOOLS) is True
    assert drops_tools(ChatTemplates({"default": CHATML_TOOLS}), TOOLS) is False
    assert drops_tools(ChatTemplates({"default": CHAT_TEMPLATE}), TOOLS) is False
    # transformers takes a model's 'tool_use' template when tools are given
    assert drops_tools(ChatTemplates({"default": SMOL, "tool_use": CHATML_TOOLS}), TOOLS) is False
    assert drops_tools(ChatTemplates({}), TOOLS) is None  # no template: another check's problem
    assert drops_tools(ChatTemplates({"default": "{{ raise_exception('no') }}"}), TOOLS) is None


def test_a_setting_is_a_shipped_name_or_a_file(tmp_path: Path) -> None:
    assert set(SHIPPED_TEMPLATES) == {"chatml-tools"}
    assert chat_template_text("chatml-tools") == CHATML_TOOLS
    path = tmp_path / "mine.jinja"
    path.write_text(SMOL)
    assert chat_template_text(str(path)) == SMOL and template_setting_problem(str(path)) is None
    with pytest.raises(ConfigError, match=r"'chatml' is neither a shipped template \(chatml-tools\) nor a readable"):
        chat_template_text("chatml")
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for m in messages %}")
    problem = template_setting_problem(str(broken))
    assert problem is not None and problem.startswith(f"{str(broken)!r} is not a Jinja template that compiles")


def write_model(path: Path, tokenizer: dict[str, Any], files: dict[str, str] | None = None) -> str:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"vocab_size": 512}))
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer))
    for name, text in (files or {}).items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    return str(path)


def test_a_models_templates_are_read_as_transformers_loads_them(tmp_path: Path) -> None:
    plain = write_model(tmp_path / "a", {"chat_template": SMOL, "eos_token": {"content": "<|im_end|>"}})
    assert read_chat_templates(plain) == ChatTemplates({"default": SMOL}, {"eos_token": "<|im_end|>"})
    named = [{"name": "default", "template": SMOL}, {"name": "tool_use", "template": CHATML_TOOLS}]
    assert read_chat_templates(write_model(tmp_path / "b", {"chat_template": named})) == ChatTemplates(
        {"default": SMOL, "tool_use": CHATML_TOOLS}
    )
    files = {"chat_template.jinja": SMOL, "additional_chat_templates/tool_use.jinja": CHATML_TOOLS}
    found = read_chat_templates(write_model(tmp_path / "c", {"chat_template": "ignored"}, files))
    assert found == ChatTemplates({"default": SMOL, "tool_use": CHATML_TOOLS})  # files win over the config's
    assert read_chat_templates(write_model(tmp_path / "d", {})) == ChatTemplates({})
    assert read_chat_templates(str(tmp_path / "nowhere")) is None
    assert read_chat_templates("tiny:x") == ChatTemplates(
        {"default": CHAT_TEMPLATE}, {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    )


def test_the_template_ships_in_the_wheel() -> None:
    import tomllib

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    data = pyproject["tool"]["setuptools"]["package-data"]["lakeflow.models"]
    assert "templates/*.jinja" in data
    assert all(
        (Path(__file__).resolve().parents[2] / "lakeflow/models/templates" / f).is_file()
        for f in SHIPPED_TEMPLATES.values()
    )
