"""Pre-rollout (`dataflow/issuer.py`): the task issuer keeps its target of tasks outstanding, never two
for one prompt, rebuilds them from the bucket, reissues expired claims and releases finished tasks;
curation policies and GRESO's adaptation. The service-level tests drive it through `DataflowService`."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from lakeflow.catalog.state import Catalog
from lakeflow.dataflow.config import DataflowConfig
from lakeflow.dataflow.datasets import load_prompts
from lakeflow.dataflow.issuer import TaskIssuer
from lakeflow.dataflow.service import DataflowService
from lakeflow.io import Store, open_store
from lakeflow.lake import layout
from lakeflow.lake import tasks as lake_tasks
from tests.dataflow.helpers import config, now, roll_out_tasks


def issuer_for(store: Store, cfg: DataflowConfig) -> TaskIssuer:
    """A task issuer over a fresh catalog holding each model's prompts."""
    catalog = Catalog()
    for model in cfg.models:
        assert model.dataset is not None
        catalog.tasks.load_prompts(model.id, load_prompts(model.dataset))
    return TaskIssuer(store, catalog, cfg)


def open_prompts(store: Store) -> list[str]:
    """The prompt of every open task object of the model 'policy'."""
    open_ids, _ = lake_tasks.list_tasks(store, "policy")
    return [lake_tasks.read_task(store, "policy", t).prompt_id for t in sorted(open_ids)]


def test_the_issuer_fills_its_target_once_and_never_gives_a_prompt_two_tasks(store: Store) -> None:
    cfg = config(prompts_per_step=4, steps_ahead=1, dataset={"type": "synthetic", "prompts": 20})
    issuer, model = issuer_for(store, cfg), cfg.models[0]
    assert issuer.top_up(model, 0, now()) == 12  # 4 groups per step * (1 + 1 steps) * buffer_factor 1.5
    assert issuer.top_up(model, 0, now()) == 0  # the target is met: nothing more
    open_ids, claimed = lake_tasks.list_tasks(store, "policy")
    assert len(open_ids) == 12 and claimed == set()
    assert set(issuer.catalog.tasks.outstanding("policy")) == open_ids
    assert len(set(open_prompts(store))) == 12
    done = sorted(open_ids)[:5]
    issuer.release([("policy", t) for t in done] + [("policy", "never-issued")])  # an unknown id costs nothing
    assert lake_tasks.list_tasks(store, "policy")[0] == open_ids - set(done)
    assert issuer.top_up(model, 0, now()) == 5  # the finished tasks' slots, refilled
    prompts = open_prompts(store)
    assert len(prompts) == len(set(prompts)) == 12  # still no prompt with two outstanding tasks
    issuer.catalog.close()


def test_a_restarted_issuer_adopts_the_buckets_tasks_instead_of_issuing_more(store: Store) -> None:
    cfg = config(dataset={"type": "synthetic", "prompts": 20})
    first = issuer_for(store, cfg)
    issued = first.top_up(cfg.models[0], 0, now())
    first.catalog.close()  # a crash: the catalog is gone, the task objects stay
    store.put(layout.task_key("policy", "tcorrupt"), b"not a task")
    second = issuer_for(store, cfg)
    assert second.sync(cfg.models[0], now()) == 0
    assert len(second.catalog.tasks.outstanding("policy")) == issued
    assert "tcorrupt" not in lake_tasks.list_tasks(store, "policy")[0]  # a corrupt task object is dropped
    assert second.top_up(cfg.models[0], 0, now()) == 0
    second.catalog.close()


def test_the_issuer_voids_expired_and_corrupt_claims_when_its_claim_check_is_due(store: Store) -> None:
    cfg = config(dataset={"type": "synthetic", "prompts": 20}, tasks={"claim_check_s": 600})
    issuer, model = issuer_for(store, cfg), cfg.models[0]
    issuer.top_up(model, 0, now())
    a, b, c = sorted(lake_tasks.list_tasks(store, "policy")[0])[:3]
    assert lake_tasks.claim_task(store, "policy", a, "raas-slow", timedelta(minutes=5)) is not None
    assert lake_tasks.claim_task(store, "policy", b, "raas-live", timedelta(hours=1)) is not None
    store.put(layout.claim_key("policy", c), b"{not a claim")
    start = now()  # the issuer's clock from here on: time passes only where the test moves it
    assert issuer.sync(model, start) == 1  # the corrupt claim: no rollout service holds c
    assert issuer.sync(model, start + timedelta(minutes=6)) == 0  # a's claim expired, but no check is due
    assert issuer.sync(model, start + timedelta(minutes=11)) == 1  # a's expired claim is voided
    _, claimed = lake_tasks.list_tasks(store, "policy")
    assert claimed == {b}
    held = issuer.catalog.sql("SELECT task_id, claimed_by FROM tasks WHERE claimed_by IS NOT NULL").to_pylist()
    assert held == [{"task_id": b, "claimed_by": "raas-live"}]
    assert lake_tasks.claim_task(store, "policy", a, "raas-new", timedelta(minutes=5)) is not None  # open again
    issuer.catalog.close()


def test_tasks_are_issued_until_the_buffer_is_full_then_follow_consumption(store: Store) -> None:
    cfg = config(
        prompts_per_step=4, steps_ahead=1, dataset={"type": "synthetic", "prompts": 50}, tasks={"buffer_factor": 1.5}
    )
    service = DataflowService(store, cfg)
    service.start()
    service.run(iterations=1)
    open_ids, _ = lake_tasks.list_tasks(store, "policy")
    assert len(open_ids) == 12  # 4 groups/step * (1 + 1 steps) * 1.5
    service.run(iterations=1)
    assert len(lake_tasks.list_tasks(store, "policy")[0]) == 12  # backpressure: nothing more
    done = roll_out_tasks(store, "policy", [1, 0, 1, 0], limit=8)
    service.run(iterations=1)
    # 8 groups arrived: two batches (steps 0 and 1) took them, their tasks were released, new ones issued.
    assert service.counters.batches == 2
    remaining, _ = lake_tasks.list_tasks(store, "policy")
    assert not set(done) & remaining
    assert len(remaining) == 12
    task = lake_tasks.read_task(store, "policy", sorted(remaining)[0])
    assert task.n_samples == 4 and task.answer and "What is" in task.prompt
    service.close()


def test_an_expired_claim_is_reissued_and_a_live_one_is_not(store: Store) -> None:
    cfg = config(dataset={"type": "synthetic", "prompts": 10}, tasks={"claim_check_s": 0.001})
    service = DataflowService(store, cfg)
    service.start()
    service.run(iterations=1)
    a, b = sorted(lake_tasks.list_tasks(store, "policy")[0])[:2]
    dead = lake_tasks.claim_task(store, "policy", a, "raas-dead", timedelta(seconds=-1))  # already expired
    live = lake_tasks.claim_task(store, "policy", b, "raas-live", timedelta(minutes=5))
    assert dead is not None and live is not None
    assert lake_tasks.claim_task(store, "policy", b, "raas-other", timedelta(minutes=5)) is None  # one claimant
    service.run(iterations=1)
    assert service.counters.claims_reissued == 1
    _, claimed = lake_tasks.list_tasks(store, "policy")
    assert claimed == {b}
    assert lake_tasks.claim_task(store, "policy", a, "raas-new", timedelta(minutes=5)) is not None
    # The dead service comes back and tries to renew: it learns the task was taken away.
    found = lake_tasks.read_claim(store, "policy", a)
    assert found is not None and found[0].raas_id == "raas-new"
    service.close()


def test_a_renewed_claim_outlives_its_first_deadline(store: Store) -> None:
    store.put(layout.task_key("policy", "t1"), b"x")
    claim = lake_tasks.claim_task(store, "policy", "t1", "raas-1", timedelta(seconds=1))
    assert claim is not None
    _, etag = lake_tasks.read_claim(store, "policy", "t1")  # type: ignore[misc]
    renewed = lake_tasks.renew_claim(store, "policy", claim, etag, timedelta(minutes=10))
    assert renewed is not None and not renewed[0].expired(datetime.now(UTC) + timedelta(minutes=5))
    assert lake_tasks.renew_claim(store, "policy", claim, etag, timedelta(minutes=10)) is None  # stale etag


def test_skip_solved_stops_issuing_solved_prompts(store: Store) -> None:
    cfg = config(
        prompts_per_step=2,
        steps_ahead=0,
        dataset={"type": "synthetic", "prompts": 4},
        policies={"curation": "skip_solved"},
        tasks={"buffer_factor": 1.0},
    )
    service = DataflowService(store, cfg)
    service.start()
    for _ in range(6):  # every rollout solves every prompt
        service.run(iterations=1)
        roll_out_tasks(store, "policy", [1, 1, 1, 1])
        service.run(iterations=1)
    stats = service.catalog.sql("SELECT prompt_id, pass_ema, issued FROM prompt_stats ORDER BY prompt_id").to_pylist()
    assert all(s["pass_ema"] == 1.0 for s in stats if s["issued"])
    issued_before = sum(s["issued"] for s in stats)
    service.run(iterations=2)
    assert lake_tasks.list_tasks(store, "policy")[0] == set()  # every prompt is solved: none submitted
    after = sum(s["issued"] for s in service.catalog.sql("SELECT issued FROM prompt_stats").to_pylist())
    assert after == issued_before
    service.close()


def test_curriculum_serves_the_next_part_once_the_newest_groups_of_the_first_are_solved() -> None:
    store = open_store(f"memory://lake-{uuid.uuid4().hex[:8]}")  # the policy's logic: one backend is enough
    parts = {name: {"type": "synthetic", "form": "add", "prompts": 8, "seed": i} for i, name in enumerate(("a", "b"))}
    cfg = config(
        dataset={"type": "mix", "parts": parts},
        policies={"curation": "curriculum", "filter": "drop_zero_adv"},  # dropped groups: issuing goes on
        solved_threshold=0.85,
        tasks={"buffer_factor": 1.0},
    )
    service = DataflowService(store, cfg)
    service.start()

    def rounds(rewards: list[float], n: int) -> set[str]:
        """The parts of the prompts issued over n rounds of 4 tasks, each rolled out with `rewards`."""
        issued = set()
        for _ in range(n):
            service.run(iterations=1)
            issued |= {prompt.split(":")[0] for prompt in open_prompts(store)}
            roll_out_tasks(store, "policy", rewards)
            service.run(iterations=1)
        return issued

    assert rounds([0, 0, 0, 0], 2) == {"a"}  # all failed
    assert rounds([1, 1, 1, 1], 7) == {"a"}  # the newest 32 groups of part a: 24 solved, mean 0.75 at most
    assert rounds([1, 1, 1, 1], 2) == {"b"}  # 28 of 32 solved, mean 0.875 >= 0.85: the next part
    parts_of = service.catalog.sql("SELECT DISTINCT dataset FROM prompts ORDER BY 1").column(0).to_pylist()
    assert parts_of == ["a", "b"]
    service.close()


def test_greso_skips_zero_variance_prompts_probabilistically_with_a_safety_valve(store: Store) -> None:
    greso = {"p_easy": 0.5, "p_hard": 0.5, "floor_easy": 0.0, "floor_hard": 0.0, "max_rejections": 3}
    cfg = config(
        prompts_per_step=10,
        steps_ahead=0,
        dataset={"type": "synthetic", "prompts": 10},
        policies={"curation": "greso"},
        greso=greso,
        tasks={"buffer_factor": 1.0},
    )
    service = DataflowService(store, cfg)
    service.start()
    service.run(iterations=1)
    roll_out_tasks(store, "policy", [1, 1, 1, 1])  # every prompt: zero variance, easy
    roll_out_tasks(store, "policy", [0, 0, 0, 0])
    service.run(iterations=1)
    for _ in range(3):  # three more zero-variance rounds: streaks grow, submit probability 0.5^z shrinks
        roll_out_tasks(store, "policy", [1, 1, 1, 1])
        service.run(iterations=1)
    stats = service.catalog.sql("SELECT zero_var_streak, rejections, issued FROM prompt_stats").to_pylist()
    assert max(s["zero_var_streak"] for s in stats) >= 2
    # Skips happened (streaks > 0 make submission probabilistic) but nobody was skipped more than
    # max_rejections times in a row: the safety valve force-submits.
    assert sum(s["rejections"] for s in stats) > 0 or sum(s["issued"] for s in stats) < 50
    assert all(s["rejections"] <= 3 for s in stats)
    service.close()


def test_greso_adapts_p_toward_the_target_skip_shares_once_per_trainer_version(store: Store) -> None:
    cfg = config(
        dataset={"type": "synthetic", "prompts": 50},
        policies={"curation": "greso"},
        greso={"p_easy": 0.5, "p_hard": 0.5, "step": 0.01, "target_skip_easy": 0.5, "target_skip_hard": 0.5},
    )
    issuer, model = issuer_for(store, cfg), cfg.models[0]
    g = issuer.greso["policy"]

    def top_up(version: int) -> tuple[float, float]:
        """Issue tasks seen by a trainer at `version` (the outstanding ones finished first: an issuer
        adapts only when it issues); p afterwards."""
        issuer.release([("policy", t) for t in lake_tasks.list_tasks(store, "policy")[0]])
        assert issuer.top_up(model, version, now()) > 0
        return round(g.p_easy, 2), round(g.p_hard, 2)

    assert top_up(0) == (0.5, 0.5)  # the first version seen: nothing to adapt from yet
    g.seen, g.skipped = {"easy": 10, "hard": 10}, {"easy": 9, "hard": 1}  # easy skipped too often
    assert top_up(1) == (0.51, 0.49)  # skip fewer easy, more hard
    g.seen, g.skipped = {"easy": 10, "hard": 10}, {"easy": 9, "hard": 1}
    assert top_up(1) == (0.51, 0.49)  # the same version: no second adjustment
    issuer.catalog.close()
