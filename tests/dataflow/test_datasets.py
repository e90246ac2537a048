"""Prompt datasets: JSONL and Parquet files, generated arithmetic, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeflow.dataflow.config import FileDataset, SyntheticDataset
from lakeflow.dataflow.datasets import load_prompts
from lakeflow.errors import ConfigError


def test_jsonl_and_parquet_files(tmp_path: Path) -> None:
    rows = [{"prompt": "1+1?", "answer": "2"}, {"prompt": "2+2?", "answer": "4", "task_type": "math"}]
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows))
    table = load_prompts(FileDataset(path=str(jsonl)))
    assert table.column("prompt").to_pylist() == ["1+1?", "2+2?"]
    assert table.column("answer").to_pylist() == ["2", "4"]
    assert table.column("dataset").to_pylist() == ["d", "d"]
    assert len(set(table.column("prompt_id").to_pylist())) == 2
    parquet = tmp_path / "e.parquet"
    pq.write_table(pa.table({"prompt_id": ["a", "b"], "prompt": ["x", "y"]}), parquet)
    table = load_prompts(FileDataset(path=str(parquet), name="mine"))
    assert table.column("prompt_id").to_pylist() == ["a", "b"] and table.column("answer").to_pylist() == ["", ""]
    assert table.column("dataset").to_pylist() == ["mine", "mine"]


def test_bad_datasets_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read dataset"):
        load_prompts(FileDataset(path=str(tmp_path / "missing.jsonl")))
    no_prompt = tmp_path / "n.jsonl"
    no_prompt.write_text(json.dumps({"question": "?"}))
    with pytest.raises(ConfigError, match="has no 'prompt' column"):
        load_prompts(FileDataset(path=str(no_prompt)))
    dup = tmp_path / "dup.parquet"
    pq.write_table(pa.table({"prompt_id": ["a", "a"], "prompt": ["x", "y"]}), dup)
    with pytest.raises(ConfigError, match="not unique"):
        load_prompts(FileDataset(path=str(dup)))


def test_synthetic_prompts_have_exact_answers() -> None:
    table = load_prompts(SyntheticDataset(prompts=50, seed=3))
    for prompt, answer in zip(table.column("prompt").to_pylist(), table.column("answer").to_pylist(), strict=True):
        a, b, c = (int(w.rstrip("?")) for w in prompt.split() if w.rstrip("?").isdigit())
        assert int(answer) == a + b * c
