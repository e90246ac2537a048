"""Agentic evaluation: an agent pool's held-out tasks played as whole episodes per version (the calculator
environment, driven by a scripted engine whose behaviour changes with the weights version it loaded), and
an agent program's failures counted by end, never as silent passes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from lakeflow.evaluation import EvalConfig, EvalService
from lakeflow.io import Store, open_store
from lakeflow.lakeview import connect_lake
from lakeflow.models import resolve_model
from lakeflow.raas.agent.envs.calculator import make_tasks
from lakeflow.report import write_report
from lakeflow.weights import local_version, publish, raw_tensor
from tests.raas.agent.helpers import Scripted, call

pytest.importorskip("transformers")


NUMBER = re.compile(r"-?\d+")


class Versioned(Scripted):
    """Version 0 answers at once (wrongly); version 1 calls `multiply` with the question's numbers, then
    answers the tool's result."""

    def __init__(self, tokenizer: object) -> None:
        super().__init__(tokenizer, self.answer)
        self.version = -1

    def load(self, model_dir: str) -> None:
        self.version = int(str((local_version(model_dir) or {})["version"]))

    def answer(self, context: str) -> str:
        if self.version == 0:
            return "It is 12."
        if "<|im_start|>tool" in context:  # the tool answered: say its number
            return "It is " + NUMBER.findall(context)[-1] + "."
        a, b = re.findall(r"What is (\d+) \* (\d+)\?", context)[-1]
        return call("multiply", a=int(a), b=int(b))


def publish_versions(store: Store, n: int) -> None:
    for v in range(n):
        state = {"w": raw_tensor("F32", (2,), np.array([v, v + 1], np.float32).view(np.uint32))}
        publish(store, "policy", state, files={"config.json": b"{}"}, full_every=1)


def test_an_environment_pool_is_evaluated_by_whole_episodes(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("tiny:eval-episodes", tmp_path / "models"))
    store = open_store(str(tmp_path / "lake"))
    data = tmp_path / "held.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in make_tasks(3, seed=7)))
    publish_versions(store, 2)
    config = EvalConfig.model_validate(
        {
            "dataset": {"type": "file", "path": str(data)},
            "n_samples": 2,
            "temperature": 0.7,
            "max_new_tokens": 64,
            "environment": {"name": "calculator", "max_turns": 3},
        }
    )
    service = EvalService(store, "policy", config, engine=Versioned(tokenizer))
    for version in (0, 1):
        service.evaluate(version)
    service.close()
    rows = connect_lake(store).sql("SELECT * FROM eval ORDER BY policy_version").to_pylist()
    got = [(r["pass_at_1"], r["pass_at_k"], r["turns_mean"], r["tool_calls_mean"], json.loads(r["ends"])) for r in rows]
    assert got == [
        (0.0, 0.0, 1.0, 0.0, {"done": 6}),  # answered at once, wrongly
        (1.0, 1.0, 2.0, 1.0, {"done": 6}),  # called the tool, answered its result
    ]
    assert [r["prompts"] for r in rows] == [3, 3] and rows[0]["response_len_mean"] is None
    page = write_report(store, tmp_path / "report").read_text()  # the report's table of agent evaluations
    assert "Agent evaluation (held-out episodes)" in page and '<td class="n">1.000 (k=2)</td>' in page


def test_an_agent_program_s_failures_count_as_failing_with_their_end(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    data = tmp_path / "held.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n" for i in range(2)))
    publish_versions(store, 1)
    program = tmp_path / "broken.py"
    program.write_text("def main(task, client):\n    raise RuntimeError('the harness crashed')\n")
    config = EvalConfig.model_validate(
        {
            "dataset": {"type": "file", "path": str(data)},
            "n_samples": 2,
            "agent": {"program": f"{program}:main"},
        }
    )
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("tiny:eval-episodes", tmp_path / "models"))
    service = EvalService(store, "policy", config, engine=Versioned(tokenizer))
    row = service.evaluate(0)
    service.close()
    assert row is not None and json.loads(row["ends"]) == {"agent_error": 4}
    assert (row["pass_at_1"], row["pass_at_k"], row["turns_mean"]) == (0.0, 0.0, 0.0)
