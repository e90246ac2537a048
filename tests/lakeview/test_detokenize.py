"""Text beside tokens: `prompt_text` / `response_text` of the trajectories view and `detokenize()` decode
the stored ids with the model's own tokenizer (weights version 0's tokenizer.json), only for the rows a
query reads; a model without a readable tokenizer gets NULL text, never an error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lakeflow.io import Store, open_store
from lakeflow.lake import layout
from lakeflow.lakeview import connect_lake, detokenize
from tests.dataflow.helpers import group, write_groups

tokenizers = pytest.importorskip("tokenizers")

CORPUS = ["What is 3 + 4? The answer is 7.", "I think it is 12, not 7.", "Verdict: yes. The answer 7 is correct."]


def _tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 20, trainer=trainer)
    return tok


def _lake(tmp_path: Path) -> tuple[Store, dict[float, str]]:
    store = open_store(str(tmp_path / "lake"))
    tok = _tokenizer()
    store.put(layout.weights_object_key("policy", 0, "tokenizer.json"), tok.to_str().encode())
    prompt = tok.encode(CORPUS[0]).ids
    responses = {1.0: "The answer is 7.", 0.0: "I think it is 12, not 7."}
    samples = group("policy", [1.0, 0.0, 0.0, 1.0])
    for s in samples:
        ids = tok.encode(responses[s["reward"]]).ids
        s.update(prompt_ids=prompt, response_ids=ids, response_logprobs=[-0.5] * len(ids), loss_mask=[1] * len(ids))
    write_groups(store, [samples, group("other", [0.0, 0.0])])  # `other` has no tokenizer in the lake
    return store, responses


def test_response_text_of_the_failures(tmp_path: Path) -> None:
    store, responses = _lake(tmp_path)
    lake = connect_lake(store)
    rows = lake.sql("SELECT response_text FROM trajectories WHERE reward = 0 AND model_id = 'policy' LIMIT 5")
    assert rows.column("response_text").to_pylist() == [responses[0.0]] * 2
    texts = lake.sql("SELECT DISTINCT prompt_text, response_text FROM trajectories WHERE model_id = 'policy'")
    assert sorted(texts.to_pylist(), key=str) == sorted(
        [{"prompt_text": CORPUS[0], "response_text": r} for r in responses.values()], key=str
    )
    other = lake.sql("SELECT response_text FROM trajectories WHERE model_id = 'other'")
    assert other.column("response_text").to_pylist() == [None, None]  # no tokenizer: NULL, not an error
    # a row of `policy`'s: LIMIT 1 alone may give one of `other`'s, whose ids are not of this tokenizer
    direct = lake.sql("SELECT detokenize('policy', prompt_ids[1:3]) AS t FROM trajectories WHERE model_id = 'policy'")
    assert CORPUS[0].startswith(direct.column("t")[0].as_py())


def test_text_is_decoded_only_for_rows_a_query_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, _ = _lake(tmp_path)
    decoded: list[int] = []
    original = detokenize.Detokenizer.decode

    def counting(self: detokenize.Detokenizer, models: Any, ids: Any) -> Any:
        decoded.append(len(models))
        return original(self, models, ids)

    monkeypatch.setattr(detokenize.Detokenizer, "decode", counting)
    lake = connect_lake(store)
    assert lake.sql("SELECT count(*) AS n, avg(reward) AS r FROM trajectories").column("n")[0].as_py() == 6
    assert decoded == []  # not read, not decoded
    lake.sql("SELECT response_text FROM trajectories WHERE reward = 1")
    assert sum(decoded) == 2  # the two rows with reward 1, not the six of the lake
