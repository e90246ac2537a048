"""The evaluation service: pass@k, which versions it evaluates, and one evaluation end to end on real
published weights with a scripted engine (the engines themselves are tested in tests/raas)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from lakeflow.evaluation import EvalConfig, EvalService, pass_at_k
from lakeflow.io import Store, open_store
from lakeflow.lakeview import connect_lake
from lakeflow.raas.engines import ChatMessage, Completion, Prompt
from lakeflow.weights import local_version, publish, raw_tensor

pytest.importorskip("math_verify")


def test_pass_at_k() -> None:
    assert pass_at_k(4, 0, 1) == 0.0 and pass_at_k(4, 4, 1) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 4) == 1.0 and pass_at_k(4, 2, 3) == 1.0  # fewer than k failures: always a pass
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)
    with pytest.raises(ValueError):
        pass_at_k(2, 3, 1)


class Scripted:
    """An engine answering by weight version: the text of `answers[version]` (the version pull wrote
    into the directory's marker)."""

    max_model_len = 64

    def __init__(self, answers: dict[int, str]) -> None:
        self.answers = answers
        self.version = -1
        self.calls: list[tuple[float, int]] = []  # (temperature, prompts) of each generate call

    def load(self, model_dir: str) -> None:
        marker = local_version(model_dir) or {}
        self.version = int(str(marker["version"]))

    def encode_chat(self, messages: Sequence[ChatMessage], add_generation_prompt: bool = True) -> list[int]:
        return [1, 2, 3]

    def decode(self, token_ids: Sequence[int]) -> str:
        return ""

    def generate(
        self, prompts: Sequence[Prompt], n: int, max_tokens: int, temperature: float
    ) -> list[list[Completion]]:
        self.calls.append((temperature, len(prompts)))
        text = self.answers[self.version]
        return [[Completion([1, 2, 3], [5, 6], [-0.1, -0.2], "stop", text) for _ in range(n)] for _ in prompts]


def publish_versions(store: Store, n: int) -> None:
    for v in range(n):
        state = {"w": raw_tensor("F32", (2,), np.array([v, v + 1], np.float32).view(np.uint32))}
        publish(store, "policy", state, files={"config.json": b"{}"}, full_every=1)


def test_follows_versions_and_writes_the_eval_table(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    data = tmp_path / "held.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"What is {i} + 7 - {i}?", "answer": "7"}) + "\n" for i in range(4)))
    publish_versions(store, 4)
    engine = Scripted({0: "8", 1: "7", 2: "seven", 3: "7"})
    config = EvalConfig.model_validate({"dataset": {"type": "file", "path": str(data)}, "every": 2})
    service = EvalService(store, "policy", config, engine=engine)
    assert service.due(3) == 0
    service.run(until_version=3)  # versions 0 and 2 (every 2), then 3 (the last one of the run)
    service.close()
    assert engine.calls == [(0.0, 4)] * 3  # greedy (temperature 0), every prompt of a version in one call
    lake = connect_lake(store)
    rows = lake.sql("SELECT policy_version, pass_at_1, reward_mean, prompts FROM eval ORDER BY 1").to_pylist()
    assert [(r["policy_version"], r["pass_at_1"], r["prompts"]) for r in rows] == [
        (0, 0.0, 4),
        (2, 0.0, 4),
        (3, 1.0, 4),
    ]
    again = EvalService(store, "policy", config, engine=engine)  # a restart skips what is in the table
    assert again.done == {0, 2, 3} and again.due(3, until_version=3) is None
    again.close()
