"""A tiny Qwen2 model and byte-level BPE tokenizer, built locally, saved as a Hugging Face directory.

`resolve_model("tiny:<name>")` builds (once, cached) a ~0.2M-parameter Qwen2 whose shapes
vLLM's CPU backend accepts (head_dim 64), with a tokenizer trained on arithmetic text and a
chat template, so the whole RL loop runs on 2 CPU cores. Any other reference (a local
directory, or a Hugging Face hub id for users who can reach the hub) is passed through.
Every name builds the same model (512 positions, 512 tokens) except those of `TINY_RECIPES`:
`tiny:long` has 32768 positions and 4096 tokens whose tokenizer also learnt English prose (the
Python documentation's topics, shipped with Python as `pydoc_data`), for coding harnesses whose
system prompts and tool lists are thousands of words (Claude Code's, Codex CLI's): ~3 characters
a token where the arithmetic tokenizer gets ~1.2, so their prompts are a third as long.

The template takes `tools=` the way Qwen's does (a system block of the tools' JSON schemas, calls as
`<tool_call>{"name": ..., "arguments": ...}</tool_call>`); without tools it renders as before. Like
Qwen's, the tokenizer has `<tool_call>` and `</tool_call>` as single (non-special) tokens, and the
call of the tiny-agent demo's argument-free `lookup` tool is one token too (`LOOKUP_CALL`), so a
model built from scratch can find it by sampling.
"""

from __future__ import annotations

import importlib
import json
import os
import random
import tempfile
from pathlib import Path
from typing import Any

from lakeflow.errors import MissingExtraError

TINY_PREFIX = "tiny:"
TINY_VOCAB = 512  # rows of the tiny recipe's embedding (its tokenizer has at most this many tokens)
TINY_POSITIONS = 512  # its max_position_embeddings: longest prompt + completion, tokens
# build_tiny_model's keywords of the names that are not the default recipe
TINY_RECIPES: dict[str, dict[str, Any]] = {"long": {"positions": 32768, "vocab_size": 4096, "prose": True}}
TINY_VERSION = 3  # of the recipe (corpus, shapes, tokens): part of the cache path, so a changed recipe is rebuilt
CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages and messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n{% endif %}"
    "<tools>\n{% for tool in tools %}{{ (tool['function'] if tool['function'] is defined else tool) | tojson }}\n"
    "{% endfor %}</tools><|im_end|>\n{% endif %}"
    "{% for message in messages %}{% if not (tools and loop.first and message['role'] == 'system') %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] or '' }}"
    "{% for call in message['tool_calls'] or [] %}"
    "{% set f = call['function'] if call['function'] is defined else call %}"
    '<tool_call>{"name": "{{ f[\'name\'] }}", "arguments": '
    "{% if f['arguments'] is string %}{{ f['arguments'] }}{% else %}{{ f['arguments'] | tojson }}{% endif %}"
    "}</tool_call>{% endfor %}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
LOOKUP_CALL = '<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'
ADDED = ["<tool_call>", "</tool_call>", LOOKUP_CALL]  # whole tokens, not special: decoded text keeps them


def _corpus(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        a, b, c = rng.randint(1, 99), rng.randint(1, 99), rng.randint(1, 99)
        lines.append(f"What is {a} + {b} * {c}? Answer with the number only. {a + b * c}")
        lines.append(f"The answer is {rng.randint(0, 10000)}. user assistant system")
        verdict = "yes" if rng.random() < 0.5 else "no"  # the verifier's words are whole tokens
        lines.append(
            f"Verdict: {verdict}. The answer {rng.randint(0, 100)} is {'correct' if verdict == 'yes' else 'wrong'}."
        )
    return lines


def build_tiny_model(
    dest: str | Path,
    vocab_size: int = TINY_VOCAB,
    hidden: int = 64,
    layers: int = 2,
    seed: int = 0,
    positions: int = TINY_POSITIONS,
    prose: bool = False,
) -> Path:
    """Write a tiny randomly initialised Qwen2 + tokenizer to `dest` (a Hugging Face directory); `prose`: the
    tokenizer learns English prose too (Python's documentation topics) beside the arithmetic corpus."""
    try:
        import torch
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

        tf: Any = importlib.import_module("transformers")  # untyped for mypy: its stubs lag its API
    except ImportError as e:
        raise MissingExtraError("torch and transformers", "train") from e
    dest = Path(dest)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(ADDED), special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(_corpus(2000, seed) + (_prose() if prose else []), trainer=trainer)
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in ADDED])  # the last ids, within vocab_size
    fast = tf.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None
    )
    fast.chat_template = CHAT_TEMPLATE
    torch.manual_seed(seed)
    config = tf.Qwen2Config(
        vocab_size=len(fast),
        hidden_size=hidden,
        intermediate_size=hidden * 4,
        num_hidden_layers=layers,
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=64,  # vLLM's CPU attention refuses smaller heads
        max_position_embeddings=positions,
        tie_word_embeddings=True,
        eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=fast.convert_tokens_to_ids("<|endoftext|>"),
        bos_token_id=None,
    )
    model = tf.Qwen2ForCausalLM(config)
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-", dir=dest.parent if dest.parent.exists() else None))
    model.save_pretrained(tmp, safe_serialization=True)
    fast.save_pretrained(tmp)
    (tmp / "lakeflow-tiny.json").write_text(
        json.dumps(
            {"vocab_size": vocab_size, "hidden": hidden, "layers": layers, "positions": positions, "prose": prose}
        )
    )
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, dest)  # atomic: a half-built model is never visible
    return dest


def _prose() -> list[str]:
    """English text every Python has: the documentation's topics (~460 kB; the text of help('if') & co)."""
    from pydoc_data.topics import topics

    return [topics[k] for k in sorted(topics)]


def tiny_shape(ref: str) -> tuple[int, int]:
    """(vocabulary size, positions) of the tiny model `ref` (`tiny:<name>`) builds."""
    recipe = TINY_RECIPES.get(ref[len(TINY_PREFIX) :] or "default", {})
    return int(recipe.get("vocab_size", TINY_VOCAB)), int(recipe.get("positions", TINY_POSITIONS))


def resolve_model(ref: str, cache_dir: str | Path | None = None) -> str:
    """A local directory for `ref`: `tiny:<name>` is built once under `cache_dir`; a directory is
    returned as is; anything else is taken to be a hub id (downloaded by transformers/vLLM)."""
    if ref.startswith(TINY_PREFIX):
        name = ref[len(TINY_PREFIX) :] or "default"
        base = Path(cache_dir or os.path.join(tempfile.gettempdir(), "lakeflow-models"))
        path = base / f"tiny-{name}-v{TINY_VERSION}"
        if not (path / "config.json").exists():
            try:
                build_tiny_model(path, **TINY_RECIPES.get(name, {}))
            except OSError:
                if not (path / "config.json").exists():  # lost a race with another builder: fine if it won
                    raise
        return str(path)
    return ref
