"""Pre-rollout: outstanding tasks, claims that expire and are reissued, finished tasks, curation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from lakeflow.dataflow.service import DataflowService
from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.lake import tasks as lake_tasks
from tests.dataflow.helpers import config, roll_out_tasks


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


def test_greso_adapts_p_toward_the_target_skip_shares(store: Store) -> None:
    cfg = config(
        policies={"curation": "greso"},
        greso={"p_easy": 0.5, "p_hard": 0.5, "step": 0.01, "target_skip_easy": 0.5, "target_skip_hard": 0.5},
    )
    service = DataflowService(store, cfg)
    issuer, model = service.issuer, cfg.models[0]
    issuer._adapt_greso(model, 0)  # first version seen: nothing to adapt from yet
    g = issuer.greso["policy"]
    g.seen, g.skipped = {"easy": 10, "hard": 10}, {"easy": 9, "hard": 1}  # easy skipped too often
    issuer._adapt_greso(model, 1)
    assert (round(g.p_easy, 2), round(g.p_hard, 2)) == (0.51, 0.49)  # skip fewer easy, more hard
    g.seen, g.skipped = {"easy": 10, "hard": 10}, {"easy": 9, "hard": 1}
    issuer._adapt_greso(model, 1)  # same version: no second adjustment
    assert (round(g.p_easy, 2), round(g.p_hard, 2)) == (0.51, 0.49)
    service.catalog.close()
