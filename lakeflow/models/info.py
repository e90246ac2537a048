"""What a model says about itself without loading it: vocabulary, positions, stop and pad tokens, chat template.

Read from its config.json, generation_config.json and tokenizer files, for the tiny recipe, a local directory,
or (for a hub id) the local Hugging Face cache; None when the reference cannot be read here (a hub id never
downloaded on an offline machine). Engines and the trainer read the same files when they load the model.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakeflow.errors import ConfigError
from lakeflow.models.tiny import CHAT_TEMPLATE, SPECIAL, TINY_PREFIX, tiny_shape


@dataclass(frozen=True)
class ModelInfo:
    """The facts of one model a run config must agree with."""

    ref: str
    vocab_size: int | None  # embedding rows: token ids must be below it
    max_positions: int | None  # config.json max_position_embeddings: longest prompt + completion, tokens
    eos_token_ids: tuple[int, ...]  # ids that end a completion: generation_config's, config's, the tokenizer's eos
    pad_token_id: int | None  # config's, else generation_config's, else the tokenizer's pad token
    chat_template: bool  # the tokenizer has one: every shipped workflow renders its prompts with it


def is_hub_id(ref: str) -> bool:
    """`ref` is shaped like a hub id (owner/name) and is not a local path."""
    return not Path(ref).exists() and not ref.startswith((".", "/", "~")) and ref.count("/") == 1


def _finder(ref: str) -> Callable[[str], Path | None] | None:
    """A function from a file name of the model to its local path (None: not here), or None when the model's
    config.json is not here at all."""
    path = Path(ref)
    if path.is_dir():
        if not (path / "config.json").is_file():
            return None

        def here(name: str) -> Path | None:
            return path / name if (path / name).is_file() else None

        return here
    if not is_hub_id(ref):
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None

    def cached(name: str) -> Path | None:
        found = try_to_load_from_cache(ref, name)
        return Path(found) if isinstance(found, str) else None

    return cached if cached("config.json") is not None else None


def read_matrix_modules(ref: str) -> list[str] | None:
    """The last name part of every module with a 2-D `weight` (the Linear layers, and embeddings, whose names
    say `embed`, left out), read from the safetensors headers of a model whose files are here (a directory,
    the Hugging Face cache): what a LoRA `targets` may name. None when they are not here (or for `tiny:`,
    built on first use: the trainer checks at start)."""
    find = _finder(ref)
    if find is None:
        return None
    index = find("model.safetensors.index.json")
    try:
        if index is not None:
            names = sorted(set(_json(index).get("weight_map", {}).values()))
            paths = [p for n in names if (p := find(n)) is not None]
        else:
            paths = [p for p in [find("model.safetensors")] if p is not None]
        headers = [_safetensors_header(p) for p in paths]
    except (OSError, ValueError):
        return None
    if not headers:
        return None
    found = set()
    for header in headers:
        for name, info in header.items():
            shape = info.get("shape") if isinstance(info, dict) else None
            if name.endswith(".weight") and isinstance(shape, list) and len(shape) == 2 and "embed" not in name:
                found.add(name.removesuffix(".weight").rsplit(".", 1)[-1])
    return sorted(found)


def _safetensors_header(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        if size > 100 << 20:
            raise ValueError(f"{path}: not a safetensors file")
        header = json.loads(f.read(size))
    return header if isinstance(header, dict) else {}


def read_model_dtype(ref: str) -> str | None:
    """The dtype a model's config.json names (`dtype`, or `torch_dtype` before transformers 5) where its files
    are here (a directory, the Hugging Face cache); None when they are not, or it names none."""
    find = _finder(ref)
    try:
        config = _json(find("config.json")) if find is not None else {}
    except ConfigError:
        return None
    found = config.get("dtype") or config.get("torch_dtype")
    return found if isinstance(found, str) else None


def _json(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: cannot read the model's {path.name} ({e})") from e
    return data if isinstance(data, dict) else {}


def _ids(value: Any) -> list[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    return [v for v in value if isinstance(v, int)] if isinstance(value, list) else []


def _token_text(value: Any) -> str | None:
    """A tokenizer_config.json token: a string, or {"content": string} (older files)."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


class _Tokens:
    """Ids of token strings, from tokenizer_config.json's added tokens, else tokenizer.json (read when needed)."""

    def __init__(self, tokenizer_config: dict[str, Any], tokenizer_json: Path | None) -> None:
        decoder = tokenizer_config.get("added_tokens_decoder") or {}
        self._ids = {_token_text(t): int(i) for i, t in decoder.items() if str(i).isdigit()}
        self._file = tokenizer_json

    def id(self, text: str | None) -> int | None:
        if text is None:
            return None
        if text not in self._ids and self._file is not None:
            data, self._file = _json(self._file), None
            vocab = (data.get("model") or {}).get("vocab")
            if isinstance(vocab, dict):
                self._ids = {**{t: int(i) for t, i in vocab.items() if isinstance(i, int)}, **self._ids}
            self._ids.update({t.get("content"): int(t["id"]) for t in data.get("added_tokens") or [] if "id" in t})
        return self._ids.get(text)


def _tiny(ref: str) -> ModelInfo:
    # The tiny recipe's special tokens are its first ids (the BPE trainer adds them first): see tiny.py.
    eos, pad = SPECIAL.index("<|im_end|>"), SPECIAL.index("<|endoftext|>")
    return ModelInfo(ref, *tiny_shape(ref), (eos,), pad, True)


FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer_config.json",
    "tokenizer.json",
    "chat_template.jinja",
    "chat_template.json",
)


def read_model_info(ref: str) -> ModelInfo | None:
    """The facts of model `ref`, or None when its config.json cannot be read here. ConfigError for a file
    that is there but is not JSON. Read once per version of the files (a check asks several times)."""
    if ref.startswith(TINY_PREFIX):
        return _tiny(ref)
    find = _finder(ref)
    if find is None:
        return None
    found = {name: path for name in FILES if (path := find(name)) is not None}
    try:
        stamp = tuple((name, str(p), p.stat().st_mtime_ns, p.stat().st_size) for name, p in found.items())
    except OSError:
        return None  # a file went away while it was looked at: as if not here
    return _read(ref, stamp)


@functools.lru_cache(maxsize=64)
def _read(ref: str, stamp: tuple[tuple[str, str, int, int], ...]) -> ModelInfo:
    files = {name: Path(path) for name, path, _, _ in stamp}
    config, generation = _json(files.get("config.json")), _json(files.get("generation_config.json"))
    text = config.get("text_config") or {}  # multimodal configs keep the language model's keys there
    tokenizer = _json(files.get("tokenizer_config.json"))
    tokens = _Tokens(tokenizer, files.get("tokenizer.json"))
    size = config.get("vocab_size", text.get("vocab_size"))
    positions = config.get("max_position_embeddings", text.get("max_position_embeddings"))
    eos = _ids(generation.get("eos_token_id")) + _ids(config.get("eos_token_id", text.get("eos_token_id")))
    eos += _ids(tokens.id(_token_text(tokenizer.get("eos_token"))))
    pads = _ids(config.get("pad_token_id", text.get("pad_token_id"))) + _ids(generation.get("pad_token_id"))
    pads += _ids(tokens.id(_token_text(tokenizer.get("pad_token"))))
    template = bool(tokenizer.get("chat_template")) or "chat_template.jinja" in files or "chat_template.json" in files
    return ModelInfo(
        ref,
        vocab_size=size if isinstance(size, int) else None,
        max_positions=positions if isinstance(positions, int) and positions > 0 else None,
        eos_token_ids=tuple(sorted(set(eos))),
        pad_token_id=pads[0] if pads else None,
        chat_template=template,
    )


def tokenizer_digest(ref: str) -> str | None:
    """A fingerprint of model `ref`'s token -> id map (tokenizer.json's vocabulary and added tokens), or None
    when it cannot be read here (no tokenizer.json, a tiny model built later, a hub id not in the cache). Two
    models with the same digest give the same ids to the same tokens: a teacher's logprobs are of the
    student's tokens."""
    if ref.startswith(TINY_PREFIX):
        return None
    find = _finder(ref)
    path = find("tokenizer.json") if find is not None else None
    data = _json(path)
    vocab = (data.get("model") or {}).get("vocab")
    if not isinstance(vocab, dict):
        return None
    added = sorted((t.get("id"), t.get("content")) for t in data.get("added_tokens") or [] if isinstance(t, dict))
    text = json.dumps([sorted(vocab.items(), key=lambda kv: str(kv[1])), added], default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def model_vocab_size(ref: str) -> int | None:
    """The embedding rows of model `ref` (token ids must be below it), or None when it cannot be read here."""
    info = read_model_info(ref)
    return None if info is None else info.vocab_size


def read_model_config(ref: str) -> dict[str, Any] | None:
    """Model `ref`'s config.json as a dict (a local directory's, or the local Hugging Face cache's for a hub
    id), or None when it cannot be read here; ConfigError for a config.json that is not JSON. The tiny recipe
    has none (it is built when first used)."""
    if ref.startswith(TINY_PREFIX):
        return None
    find = _finder(ref)
    return None if find is None else _json(find("config.json"))


SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
TEMPLATE_DIR = "additional_chat_templates"  # transformers' folder of named templates (<name>.jinja)


@dataclass(frozen=True)
class ChatTemplates:
    """A model's chat templates as its tokenizer loads them: by name ('default'; a 'tool_use' one is taken when
    tools are given), and the special tokens the tokenizer hands every template (bos_token, eos_token, ...)."""

    templates: Mapping[str, str]
    tokens: Mapping[str, str] = field(default_factory=dict)

    def template(self, tools: bool) -> str | None:
        """The template transformers renders with, with or without tools (None: the model has none)."""
        if tools and "tool_use" in self.templates:
            return self.templates["tool_use"]
        return self.templates.get("default")


def read_chat_templates(ref: str) -> ChatTemplates | None:
    """The chat templates of model `ref` as transformers loads them (chat_template.jinja and
    additional_chat_templates/*.jinja, else tokenizer_config.json's chat_template), or None when its files
    cannot be read here. ConfigError for a tokenizer_config.json that is not JSON."""
    if ref.startswith(TINY_PREFIX):
        return ChatTemplates({"default": CHAT_TEMPLATE}, {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"})
    find = _finder(ref)
    if find is None:
        return None
    tokenizer = _json(find("tokenizer_config.json"))
    tokens = {k: text for k in SPECIAL_TOKEN_KEYS if (text := _token_text(tokenizer.get(k))) is not None}
    files: dict[str, Path] = {}
    if (default := find("chat_template.jinja")) is not None:
        files["default"] = default
    folder = Path(ref) / TEMPLATE_DIR
    if folder.is_dir():
        files.update({p.stem: p for p in sorted(folder.glob("*.jinja"))})
    elif (tool_use := find(f"{TEMPLATE_DIR}/tool_use.jinja")) is not None:  # a hub id's cached files
        files["tool_use"] = tool_use
    try:
        if files:  # transformers: template files replace tokenizer_config.json's
            return ChatTemplates({name: p.read_text(encoding="utf-8") for name, p in files.items()}, tokens)
    except OSError as e:
        raise ConfigError(f"{ref}: cannot read the model's chat template ({e})") from e
    given = tokenizer.get("chat_template")
    if isinstance(given, str):
        return ChatTemplates({"default": given}, tokens)
    if isinstance(given, list):  # [{"name": ..., "template": ...}, ...]
        named = {t["name"]: t["template"] for t in given if isinstance(t, dict) and isinstance(t.get("template"), str)}
        return ChatTemplates(named, tokens)
    return ChatTemplates({}, tokens)
