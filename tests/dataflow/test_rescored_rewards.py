"""Training on a re-scoring: a model whose reward policy is `rescored` takes each sample's reward from the
lake's `rescores` table at ingest, so the batch the dataflow serves carries the new rewards, group statistics
computed from them and so the trainer's advantages; samples without a new reward are quarantined, never
served with the stored one."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakeflow.catalog.policy import load_policy
from lakeflow.catalog.state import check_policy
from lakeflow.dataflow.service import DataflowService
from lakeflow.errors import PolicyError
from lakeflow.evaluation.rescore import rescore
from lakeflow.io import Store, open_store
from lakeflow.lake import layout
from lakeflow.lake.batch import read_batch
from tests.dataflow.helpers import config, group, write_groups
from tests.lakeview.test_detokenize import _tokenizer

RESPONSES = {1.0: "The answer is 7.", 0.0: "I think it is 12."}
OPPOSITE = "tests.evaluation.rescore_rewards:says_twelve"  # 1 for the '12' responses: the stored reward's opposite


def _lake(tmp_path: Path) -> Store:
    """Two groups of four whose stored rewards say which response each sample got, and a tokenizer."""
    store = open_store(str(tmp_path / "lake"))
    tok = _tokenizer()
    store.put(layout.weights_object_key("policy", 0, "tokenizer.json"), tok.to_str().encode())
    groups = [group("policy", [1.0, 0.0, 0.0, 0.0], group_id="a"), group("policy", [1.0, 1.0, 1.0, 0.0], group_id="b")]
    for sample in (s for g in groups for s in g):
        ids = tok.encode(RESPONSES[sample["reward"]]).ids
        sample.update(response_ids=ids, response_logprobs=[-0.5] * len(ids), loss_mask=[1] * len(ids))
    write_groups(store, groups)
    return store


def _serve(store: Store, **model: object) -> DataflowService:
    service = DataflowService(store, config(vocab_size=1000, prompts_per_step=1, dataset=None, **model))
    service.start()
    service.run(iterations=1)
    return service


def test_the_served_batch_carries_the_rescored_rewards_and_their_advantages(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from lakeflow.trainer.losses import group_advantages

    store = _lake(tmp_path)
    assert rescore(store, OPPOSITE, where="group_id = 'a'", name="opposite", without_answers=True).samples == 4
    service = _serve(store, policies={"reward": "rescored"}, rescore="opposite")
    rows = read_batch(store, "policy", 0)[0].to_pylist()
    assert {r["group_id"] for r in rows} == {"a"}
    assert sorted(r["reward"] for r in rows) == [0.0, 1.0, 1.0, 1.0]  # stored: [1, 0, 0, 0]
    assert rows[0]["group_mean"] == 0.75 and rows[0]["group_std"] == pytest.approx(0.5)
    batch = {c: torch.tensor([r[c] for r in rows], dtype=torch.float64) for c in ("reward", "group_mean", "group_std")}
    advantages = group_advantages(batch["reward"], batch["group_mean"], batch["group_std"])
    # the sample stored as the only right one (reward 1, advantage +1.5) is now the only wrong one
    assert sorted(advantages.tolist()) == pytest.approx([-1.5, 0.5, 0.5, 0.5], abs=1e-5)
    # group b has no re-scoring: quarantined with the reason, never served with its stored rewards
    quarantined = service.catalog.sql("SELECT rows, reason FROM quarantine").to_pylist()
    assert quarantined == [{"rows": 4, "reason": "no reward from reward policy 'rescored' (not re-scored, or the "
                            "re-scoring failed)"}]  # fmt: skip
    service.close()


def test_stored_rewards_are_the_default(tmp_path: Path) -> None:
    store = _lake(tmp_path)
    rescore(store, OPPOSITE, name="opposite", without_answers=True)
    service = _serve(store)
    rows = read_batch(store, "policy", 0)[0].to_pylist()
    assert sorted(r["reward"] for r in rows) == [0.0, 0.0, 0.0, 1.0]  # group a as stored
    service.close()


def test_reward_policies_are_checked(tmp_path: Path) -> None:
    for name in ("stored", "rescored"):
        assert check_policy(load_policy("reward", name)).column_names == ["sample_id", "reward"]
    twice = tmp_path / "twice.sql"
    twice.write_text("SELECT sample_id, reward FROM candidates UNION ALL SELECT sample_id, 0.0 FROM candidates")
    with pytest.raises(PolicyError, match="more than once"):
        check_policy(load_policy("reward", str(twice)))
    with pytest.raises(ValueError, match="set `rescore`"):
        config(policies={"reward": "rescored"})
