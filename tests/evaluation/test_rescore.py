"""`lakeflow rescore`: stored samples scored again with another reward, their text decoded by the model's own
tokenizer and their reference answers from the catalog's prompts, the new rewards committed to the lake's
`rescores` table beside the stored ones; nothing is written when the samples cannot be scored."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from lakeflow.catalog.state import Catalog
from lakeflow.cli import main
from lakeflow.dataflow.checkpoint import save_checkpoint
from lakeflow.errors import InputError
from lakeflow.evaluation.rescore import rescore
from lakeflow.io import Store, open_store
from lakeflow.lake import CommitCursor, layout
from lakeflow.lake.metrics import read_metrics
from lakeflow.lakeview import QueryError, connect_lake
from tests.dataflow.helpers import group, write_groups
from tests.lakeview.test_detokenize import _tokenizer

RESPONSES = {1.0: "The answer is 7.", 0.0: "I think it is 12."}


def _lake(tmp_path: Path, answers: dict[str, str] | None) -> Store:
    """Two groups of 'policy' (prompts a and b) whose stored rewards say which response each got, a
    tokenizer for it, and (with `answers`) a catalog checkpoint holding the prompts' reference answers."""
    store = open_store(str(tmp_path / "lake"))
    tok = _tokenizer()
    store.put(layout.weights_object_key("policy", 0, "tokenizer.json"), tok.to_str().encode())
    groups = [group("policy", [1.0, 0.0], prompt_id="a"), group("policy", [0.0, 0.0, 1.0], prompt_id="b")]
    for sample in (s for g in groups for s in g):
        ids = tok.encode(RESPONSES[sample["reward"]]).ids
        sample.update(response_ids=ids, response_logprobs=[-0.5] * len(ids), loss_mask=[1] * len(ids))
    write_groups(store, groups)
    if answers is not None:
        catalog = Catalog()
        ids = sorted(answers)
        prompts = {"prompt_id": ids, "prompt_order": list(range(len(ids))), "prompt": ["q"] * len(ids)}
        prompts |= {"answer": [answers[i] for i in ids], "task_type": ["math"] * len(ids), "dataset": ["d"] * len(ids)}
        catalog.tasks.load_prompts("policy", pa.table(prompts))
        save_checkpoint(store, catalog, CommitCursor(), {})
    return store


def test_samples_are_scored_again_against_the_catalogs_answers(tmp_path: Path) -> None:
    store = _lake(tmp_path, {"a": "7", "b": "12"})
    done = rescore(store, "math", where="model_id = 'policy'", name="math-again")
    assert done.samples == 5 and done.name == "math-again"
    rows, skipped = read_metrics(store, "rescores")
    assert skipped == [] and rows.num_rows == 5
    by_prompt = sorted((r["prompt_id"], r["stored_reward"], r["reward"]) for r in rows.to_pylist())
    # a (answer 7): the "7" responses are right; b (answer 12): the "12" responses are right
    assert by_prompt == [("a", 0.0, 0.0), ("a", 1.0, 1.0), ("b", 0.0, 1.0), ("b", 0.0, 1.0), ("b", 1.0, 0.0)]
    assert {r["reward_spec"] for r in rows.to_pylist()} == {"math"}
    lake = connect_lake(store)  # the rows join the samples in SQL
    joined = lake.sql(
        "SELECT count(*) AS n FROM rescores r JOIN trajectories t USING (sample_id) WHERE r.reward <> t.reward"
    )
    assert joined.column("n")[0].as_py() == 3


def test_the_command_compares_two_rewards_on_the_same_rollouts(tmp_path: Path) -> None:
    store = _lake(tmp_path, None)
    lake_url = str(tmp_path / "lake")
    runner = CliRunner()
    refused = runner.invoke(main, ["rescore", "--lake", lake_url, "--reward", "math"])
    assert refused.exit_code != 0 and "5 of 5 samples" in refused.output and "--without-answers" in refused.output
    assert read_metrics(store, "rescores")[0].num_rows == 0  # refused before writing anything
    reward = "tests.evaluation.rescore_rewards:says_twelve"
    args = ["rescore", "--lake", lake_url, "--reward", reward, "--without-answers", "--where", "reward = 0"]
    done = runner.invoke(main, args)
    assert done.exit_code == 0, done.output
    assert "re-scored 3 samples as 'tests.evaluation.rescore_rewards:says_twelve'" in done.output
    assert "mean reward 1.000 (stored 0.000)" in done.output


@pytest.mark.parametrize(
    ("where", "error"),
    [
        ("true; SELECT 1", InputError),
        ("no_such_column = 1", QueryError),
        ("model_id = 'nobody'", InputError),
    ],
)
def test_a_condition_that_is_not_one_or_chooses_nothing_is_refused(tmp_path: Path, where: str, error: type) -> None:
    store = _lake(tmp_path, {"a": "7", "b": "12"})
    with pytest.raises(error):
        rescore(store, "math", where=where)
    assert read_metrics(store, "rescores")[0].num_rows == 0


def test_a_condition_that_forges_or_repeats_samples_scores_each_stored_one_once(tmp_path: Path) -> None:
    store = _lake(tmp_path, {"a": "7", "b": "12"})
    forged = "true) UNION ALL (SELECT sample_id FROM trajectories) UNION ALL (SELECT 'forged'"
    assert rescore(store, "math", where=forged).samples == 5
