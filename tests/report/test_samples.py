"""The report's sample completions: per shown version the best and worst sample by reward and one cut off
at max_new_tokens, with text decoded by the model's tokenizer from the lake; a few versions, not all."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakeflow.io import open_store
from lakeflow.lake import layout
from lakeflow.lakeview import connect_lake
from lakeflow.report import write_report
from lakeflow.report.samples import sample_completions, spread
from tests.dataflow.helpers import group, write_groups
from tests.lakeview.test_detokenize import _tokenizer

pytest.importorskip("tokenizers")

TEXTS = {1.0: "The answer is 7.", 0.5: "I think it is 7", 0.0: "I think it is 12, not 7."}


def test_best_worst_and_truncated_per_version(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    tok = _tokenizer()
    store.put(layout.weights_object_key("policy", 0, "tokenizer.json"), tok.to_str().encode())
    groups = []
    for version in range(8):
        samples = group("policy", [1.0, 0.5, 0.0], version)
        for s in samples:
            ids = tok.encode(TEXTS[s["reward"]]).ids
            s.update(response_ids=ids, response_logprobs=[-0.1] * len(ids), loss_mask=[1] * len(ids))
            s["finish_reason"] = "length" if s["reward"] == 0.5 else "stop"
        groups.append(samples)
    write_groups(store, groups)
    shown = sample_completions(connect_lake(store))["policy"]
    assert sorted({s.version for s in shown}) == [0, 2, 4, 5, 7]  # five of the eight, first and last included
    first = [s for s in shown if s.version == 0]
    assert [(s.kind, s.reward, s.response) for s in first] == [
        ("best", 1.0, TEXTS[1.0]),
        ("worst", 0.0, TEXTS[0.0]),
        ("truncated", 0.5, TEXTS[0.5]),
    ]
    page = write_report(store, tmp_path / "report").read_text()
    assert "Sample completions" in page and "I think it is 12, not 7." in page and "truncated" in page


def test_spread_keeps_the_ends() -> None:
    assert spread([3]) == [3]
    assert spread(list(range(100)), 5) == [0, 25, 50, 74, 99]
    assert spread([1, 2, 3], 5) == [1, 2, 3]
