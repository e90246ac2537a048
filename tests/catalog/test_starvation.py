"""Starvation in sight: of a model's newest complete groups, how many the filter kept, and what the dropped
ones say (all solved, all failed), from the catalog's `groups` table."""

from __future__ import annotations

from lakeflow.catalog.state import Catalog
from lakeflow.catalog.stats import RECENT_GROUPS, recent_counts, starvation
from lakeflow.dataflow.status import render_status


def groups(model_id: str, outcomes: list[tuple[bool, bool, float]], first_arrival: int = 0) -> list[tuple]:
    """Rows (model_id, arrival, kept, zero_adv, reward_mean), one per group, oldest first."""
    return [(model_id, first_arrival + i, k, z, r) for i, (k, z, r) in enumerate(outcomes)]


def test_only_the_newest_groups_count_and_saturation_says_harder_prompts() -> None:
    learning = [(True, False, 0.5)] * 100  # long ago every group taught something
    solved = [(False, True, 1.0)] * 60 + [(True, False, 0.75)] * 4  # now nearly every group is all right
    numbers = recent_counts(groups("a", learning + solved) + groups("b", [(True, False, 0.5)] * 20, 500))
    assert numbers["a"] == {
        "recent_groups": RECENT_GROUPS,
        "recent_kept": 4,
        "recent_all_solved": 60,
        "recent_all_failed": 0,
    }
    assert (
        starvation(numbers["a"]) == "4 of the last 64 groups kept, 60 all solved: harder or fresh prompts "
        "(curation: curriculum, skip_solved or greso)"
    )
    assert starvation(numbers["b"]) is None  # every group kept


def test_failing_groups_say_larger_groups_and_too_few_say_nothing() -> None:
    failing = recent_counts(groups("a", [(False, True, 0.0)] * 30 + [(True, False, 0.2)] * 2))["a"]
    assert (
        starvation(failing)
        == "2 of the last 32 groups kept, 30 all failed: a larger group (n_samples), easier prompts or a warm-up"
    )
    assert starvation(recent_counts(groups("a", [(False, True, 0.0)] * 10))["a"]) is None  # 10 groups: too early


COLUMNS = ("weights_version", "batches", "fresh_groups", "replay_groups", "incomplete_groups", "stale_groups",
           "filtered_groups", "samples", "tasks_open", "tasks_claimed")  # fmt: skip


def test_status_says_which_model_starves() -> None:
    report = {
        "lake": "x", "checkpoint": 3, "commits_after_checkpoint": 0, "quarantined_rows": 0, "balance": None,
        "models": {"a": dict.fromkeys(COLUMNS, 0) | {"starving": "4 of the last 64 groups kept, 60 all solved: ..."}},
    }  # fmt: skip
    assert "a: the trainer starves: 4 of the last 64 groups kept, 60 all solved" in render_status(report)


def test_the_catalog_reports_the_recent_numbers_in_dataflow_stats() -> None:
    catalog = Catalog()
    try:
        (numbers,) = catalog.model_numbers(["a"]).values()
        assert {k: numbers[k] for k in ("recent_groups", "recent_kept")} == {"recent_groups": 0, "recent_kept": 0}
        assert starvation(numbers) is None
    finally:
        catalog.close()
