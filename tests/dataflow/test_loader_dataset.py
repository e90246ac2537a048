"""Datasets from a user's loader function (`{type: loader, loader, args}`): rows into the prompts table,
every malformed answer a one-line ConfigError, the check that resolves a loader without calling it, and
mixes of datasets (`type: mix`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lakeflow.dataflow.check import check_dataflow_config
from lakeflow.dataflow.config import DataflowConfig, FileDataset, LoaderDataset, MixDataset, SyntheticDataset
from lakeflow.dataflow.datasets import load_prompts, task_types
from lakeflow.errors import ConfigError

HERE = __name__
CALLS: list[int] = []


def rows(count: int = 3, task_type: str = "math") -> Iterator[dict[str, object]]:
    CALLS.append(count)
    for i in range(count):
        yield {"prompt_id": f"q{i}", "prompt": f"What is {i} + 1?", "answer": str(i + 1), "task_type": task_type}


def chat_rows() -> list[dict[str, object]]:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 + 2?"}]
    return [{"prompt": messages, "answer": {"value": 4}}, {"prompt": "3 + 3?"}]


def bad(kind: str) -> object:
    return {
        "not_rows": 42,
        "empty": [],
        "no_prompt": [{"answer": "1"}],
        "extra_key": [{"prompt": "p", "solution": "1"}],
        "some_ids": [{"prompt": "a", "prompt_id": "x"}, {"prompt": "b"}],
        "dup_ids": [{"prompt": "a", "prompt_id": "x"}, {"prompt": "b", "prompt_id": "x"}],
    }[kind]


def raises(message: str) -> list[dict[str, str]]:
    raise RuntimeError(message)


def test_rows_of_a_loader_become_prompts() -> None:
    table = load_prompts(LoaderDataset(loader=f"{HERE}:rows", args={"count": 3, "task_type": "reasoning_gym:x"}))
    assert table.column("prompt_id").to_pylist() == ["q0", "q1", "q2"]
    assert table.column("answer").to_pylist() == ["1", "2", "3"]
    assert set(table.column("task_type").to_pylist()) == {"reasoning_gym:x"}
    assert set(table.column("dataset").to_pylist()) == {"rows"}  # the loader's name by default


def test_chat_prompts_and_structured_answers_are_stored_as_json() -> None:
    table = load_prompts(LoaderDataset(loader=f"{HERE}:chat_rows", name="chat"))
    prompts = table.column("prompt").to_pylist()
    assert prompts[0].startswith('[{"role": "system"') and prompts[1] == "3 + 3?"
    assert table.column("answer").to_pylist() == ['{"value": 4}', ""]
    assert table.column("task_type").to_pylist() == ["math", "math"]  # like a file without the column
    assert len(set(table.column("prompt_id").to_pylist())) == 2


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("not_rows", "returned int; it must return"),
        ("empty", "returned no rows"),
        ("no_prompt", "row 0 is not a mapping with a 'prompt'"),
        ("extra_key", r"row 0 has keys \['solution'\]; rows hold prompt, answer, prompt_id, task_type"),
        ("some_ids", "give every row a prompt_id, or none"),
        ("dup_ids", "prompt_id values are not unique"),
    ],
)
def test_malformed_rows_are_one_line_errors(kind: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_prompts(LoaderDataset(loader=f"{HERE}:bad", args={"kind": kind}))


def test_a_failing_loader_is_named() -> None:
    with pytest.raises(ConfigError, match=r"dataset loader '.*:raises' failed: RuntimeError: no data here"):
        load_prompts(LoaderDataset(loader=f"{HERE}:raises", args={"message": "no data here"}))


def test_the_check_resolves_loaders_without_calling_them() -> None:
    CALLS.clear()
    good = {"id": "a", "vocab_size": 8, "dataset": {"type": "loader", "loader": f"{HERE}:rows", "args": {"count": 2}}}
    wrong_args = {"id": "b", "vocab_size": 8, "dataset": {"type": "loader", "loader": f"{HERE}:rows", "args": {"n": 2}}}
    missing = {"id": "c", "vocab_size": 8, "dataset": {"type": "loader", "loader": "no_such_lf_mod:rows"}}
    problems = check_dataflow_config(DataflowConfig.model_validate({"models": [good, wrong_args, missing]}))
    assert [p.split(": ")[0] for p in problems] == ["models[1].dataset.loader", "models[2].dataset.loader"]
    assert "is not callable as loader(n)" in problems[0] and "cannot import module 'no_such_lf_mod'" in problems[1]
    assert CALLS == []


def test_task_types_known_without_running_user_code(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"prompt": "a", "answer": "1", "task_type": "code"}\n{"prompt": "b", "answer": "2"}\n')
    assert task_types(FileDataset(path=str(path))) == {"code", "math"}  # a row without one is math
    assert task_types(SyntheticDataset()) == {"math"}
    assert task_types(LoaderDataset(loader=f"{HERE}:rows")) is None
    assert task_types(FileDataset(path=str(tmp_path / "elsewhere.jsonl"))) is None  # on another machine


def test_a_mix_names_its_parts_checks_each_and_keeps_their_order(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"prompt": "a", "answer": "1", "task_type": "code", "prompt_id": "x"}\n')
    mix = MixDataset.model_validate(
        {"parts": {"easy": {"type": "synthetic", "prompts": 2}, "files": {"type": "file", "path": str(path)}}}
    )
    table = load_prompts(mix)
    assert table.column("prompt_id").to_pylist() == ["easy:arith-0-0", "easy:arith-0-1", "files:x"]
    assert table.column("dataset").to_pylist() == ["easy", "easy", "files"]
    assert table.column("prompt_order").to_pylist() == [0, 1, 2]
    assert task_types(mix) == {"math", "code"}
    lost = {"type": "mix", "parts": {"a": {"type": "synthetic"}, "b": {"type": "loader", "loader": "no_such_lf_mod:f"}}}
    config = DataflowConfig.model_validate({"models": [{"id": "m", "vocab_size": 8, "dataset": lost}]})
    assert task_types(config.models[0].dataset) is None  # a part's types are unknown: the mix's too
    (problem,) = check_dataflow_config(config)
    assert problem.startswith("models[0].dataset.parts.b.loader: ")
    with pytest.raises(ValueError, match="part names \\['a b'\\] must be letters"):
        MixDataset.model_validate({"parts": {"a b": {"type": "synthetic"}}})
