"""The claim ledger on its own, against a real local lake: one claimant per task, renewals that extend the
claim, the commit window, a commit that writes the groups it still holds and drops the ones it lost."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from lakeflow.io import Store, open_store
from lakeflow.lake import LakeReader, layout
from lakeflow.lake import tasks as lake_tasks
from lakeflow.raas.config import RaasConfig
from lakeflow.raas.service.ledger import ClaimLedger
from lakeflow.raas.service.metrics import RaasStats, RolloutMetrics
from lakeflow.raas.trajectory import Trajectory
from lakeflow.tracking import MetricSink


def lake_with_tasks(tmp_path: Path, n: int) -> Store:
    store = open_store(str(tmp_path / "lake"))
    for i in range(n):
        task = lake_tasks.Task(
            task_id=f"t{i}", model_id="policy", prompt_id=f"p{i}", prompt="2+2?", answer="4", n_samples=2,
            task_type="math", issued_at=datetime.now(UTC),
        )  # fmt: skip
        lake_tasks.write_task(store, task)
    return store


def ledger(store: Store, raas_id: str = "raas-a", **kw: Any) -> ClaimLedger:
    config = RaasConfig.model_validate({"claim_ttl_s": 30, "commit_window_s": 60, "commit_max_groups": 2} | kw)
    metrics = RolloutMetrics(MetricSink(store, "rollout_stats", raas_id), raas_id, config)
    return ClaimLedger(store, "policy", raas_id, config, {"policy": "policy"}, metrics, RaasStats())


def trajectories(n: int, reward: float = 1.0) -> list[Trajectory]:
    return [Trajectory("policy", f"e{i}", [1, 2], [3, 4, 5], [-0.1] * 3, [1] * 3, reward, "stop") for i in range(n)]


def test_each_task_is_claimed_by_one_ledger_and_holds_its_versions(tmp_path: Path) -> None:
    store = lake_with_tasks(tmp_path, 3)
    a, b = ledger(store, "raas-a"), ledger(store, "raas-b")
    held_a = [a.claim({"policy": 4}) for _ in range(2)]
    held_b = b.claim({"policy": 5})
    assert all(h is not None for h in [*held_a, held_b])
    ids = [h.task.task_id for h in held_a if h] + [held_b.task.task_id if held_b else ""]
    assert sorted(ids) == ["t0", "t1", "t2"]  # three tasks, three claims, no task twice
    assert a.claim({"policy": 4}) is None and b.claim({"policy": 5}) is None  # nothing left to take
    assert sorted(a.in_flight) == sorted(ids[:2]) and held_a[0] and held_a[0].versions == {"policy": 4}
    claim = lake_tasks.read_claim(store, "policy", ids[2])
    assert claim is not None and claim[0].raas_id == "raas-b"


def test_one_listing_serves_a_wave_of_claims(tmp_path: Path, monkeypatch: Any) -> None:
    store = lake_with_tasks(tmp_path, 4)
    listings: list[str] = []
    listing = store.list
    monkeypatch.setattr(store, "list", lambda prefix: listings.append(prefix) or listing(prefix))
    book = ledger(store)
    first = book.claim({"policy": 0})  # one listing: four candidates
    other = ledger(open_store(str(tmp_path / "lake")), "raas-b")  # another service (its own store) takes one
    taken = other.claim({"policy": 0})
    rest = [book.claim({"policy": 0}) for _ in range(3)]  # the stale candidate fails its claim, no new listing
    assert first is not None and taken is not None and rest.count(None) == 1
    mine = sorted(h.task.task_id for h in [first, *rest] if h)
    assert sorted([*mine, taken.task.task_id]) == ["t0", "t1", "t2", "t3"]
    assert len(listings) == 2  # the wave's listing, and one look more when it ran out (one per claim before)


def test_a_claim_is_renewed_when_a_third_of_its_life_has_passed(tmp_path: Path) -> None:
    store = lake_with_tasks(tmp_path, 1)
    book = ledger(store, claim_ttl_s=3)
    held = book.claim({"policy": 0})
    assert held is not None
    first = held.claim.expires_at
    assert book.renew(held) and held.claim.expires_at == first  # too early: nothing written
    held.renewed -= 1.1  # a third of 3 s has passed
    time.sleep(0.01)
    assert book.renew(held) and held.claim.expires_at > first
    stored = lake_tasks.read_claim(store, "policy", held.task.task_id)
    assert stored is not None and stored[0].expires_at == held.claim.expires_at


def test_keep_renews_in_flight_and_pending_claims_and_beats(tmp_path: Path) -> None:
    store = lake_with_tasks(tmp_path, 2)
    book = ledger(store, claim_ttl_s=1.5, heartbeat_s=0.1)
    one, two = book.claim({"policy": 0}), book.claim({"policy": 0})
    assert one is not None and two is not None
    book.finish(two.task.task_id, trajectories(2), 0.1)  # pending in the window; `one` stays in flight
    before = {h.task.task_id: h.claim.expires_at for h in (one, two)}

    def renewed() -> bool:
        stored = [lake_tasks.read_claim(store, "policy", task_id) for task_id in before]
        return all(s is not None and s[0].expires_at > before[s[0].task_id] for s in stored)

    beats: list[float] = []
    done = threading.Event()
    keeper = threading.Thread(target=book.keep, args=(done, lambda: beats.append(time.monotonic())))
    keeper.start()
    deadline = time.monotonic() + 60
    while not (renewed() and len(beats) >= 2) and time.monotonic() < deadline:
        time.sleep(0.05)
    done.set()
    keeper.join()
    assert renewed() and len(beats) >= 2 and not one.lost and not two.lost


def test_the_window_is_due_when_full_and_the_commit_writes_one_shard(tmp_path: Path) -> None:
    store = lake_with_tasks(tmp_path, 2)
    book = ledger(store)
    held = [book.claim({"policy": 3}), book.claim({"policy": 3})]
    assert not book.window_due()  # nothing pending
    book.finish(held[0].task.task_id if held[0] else "", trajectories(2), 0.1)
    assert not book.window_due() and book.groups() == 1  # one of two, well within the window
    book.finish(held[1].task.task_id if held[1] else "", trajectories(2, reward=0.0), 0.1)
    assert book.window_due() and not book.in_flight
    book.commit()
    assert (book.stats.groups, book.stats.samples, book.stats.tokens, book.stats.abandoned) == (2, 4, 12, 0)
    assert not book.pending and book.groups() == 2
    commits = LakeReader(store).poll().commits
    assert len(commits) == 1  # both groups in one shard
    rows = LakeReader(store).read_shard(commits[0][1]).to_pylist()
    assert sorted(r["group_id"] for r in rows) == ["t0", "t0", "t1", "t1"]
    assert {r["policy_version"] for r in rows} == {3} and {r["raas_id"] for r in rows} == {"raas-a"}


def test_a_group_whose_claim_was_lost_is_dropped_and_the_rest_committed(tmp_path: Path) -> None:
    store = lake_with_tasks(tmp_path, 2)
    book = ledger(store, claim_ttl_s=1)
    kept, lost = book.claim({"policy": 0}), book.claim({"policy": 0})
    assert kept is not None and lost is not None
    # the dataflow reissued `lost` after its claim expired, and another service claimed it
    store.delete(layout.claim_key("policy", lost.task.task_id))
    assert lake_tasks.claim_task(store, "policy", lost.task.task_id, "raas-b", timedelta(seconds=30)) is not None
    book.finish(kept.task.task_id, trajectories(2), 0.1)
    book.finish(lost.task.task_id, trajectories(2), 0.1)
    book.commit()
    assert (book.stats.groups, book.stats.abandoned) == (1, 1) and lost.lost
    rows = [r for _, c in LakeReader(store).poll().commits for r in LakeReader(store).read_shard(c).to_pylist()]
    assert {r["group_id"] for r in rows} == {kept.task.task_id}


def test_the_heartbeat_counters_name_the_tasks_in_flight(tmp_path: Path) -> None:
    store = lake_with_tasks(tmp_path, 2)
    book = ledger(store)
    held = book.claim({"policy": 0})
    assert held is not None
    beat = book.counters()
    assert beat["task_ids"] == [held.task.task_id] and beat["live_groups"] == 1 and beat["pending_groups"] == 0
    book.finish(held.task.task_id, trajectories(2), 0.5)
    beat = book.counters()
    assert beat["task_ids"] == [] and beat["pending_groups"] == 1 and beat["tokens_per_s"] == 6 / 0.5


def test_a_group_the_runner_gives_up_gives_its_claim_up_for_a_prompt_reissue(tmp_path: Path) -> None:
    store = lake_with_tasks(tmp_path, 1)
    book = ledger(store)
    held = book.claim({"policy": 0})
    assert held is not None
    book.drop(held.task.task_id, "1 of 2 episodes failed")
    found = lake_tasks.read_claim(store, "policy", held.task.task_id)
    assert found is not None and found[0].expired(datetime.now(UTC))  # the dataflow reissues it at its next look
    assert not book.in_flight and book.stats.unscored == 1 and not book.renew(held, force=True)
