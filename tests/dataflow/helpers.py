"""Build lakes for dataflow tests: groups with chosen rewards and versions, and a fake trainer/RaaS
that act only through the bucket (claims, commits, the LATEST pointer)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from lakeflow.dataflow.config import DataflowConfig
from lakeflow.io import Store
from lakeflow.lake import ShardWriter, layout
from lakeflow.lake import tasks as lake_tasks
from lakeflow.weights.manifest import Latest


def group(model_id: str, rewards: list[float], version: int = 0, **extra: Any) -> list[dict[str, Any]]:
    """The samples of one group (one prompt rolled out len(rewards) times)."""
    gid = extra.pop("group_id", uuid.uuid4().hex[:12])
    task_id = extra.pop("task_id", gid)
    prompt_id = extra.pop("prompt_id", f"p-{gid}")
    return [
        {
            "sample_id": uuid.uuid4().hex,
            "episode_id": uuid.uuid4().hex,
            "group_id": gid,
            "prompt_id": prompt_id,
            "task_id": task_id,
            "model_id": model_id,
            "policy_version": version,
            "max_version": version,
            "prompt_ids": [1, 2, 3],
            "response_ids": [4, 5],
            "response_logprobs": [-0.1, -0.2],
            "loss_mask": [1, 1],
            "reward": r,
            "finish_reason": "stop",
            "raas_id": "test",
            **extra,
        }
        for r in rewards
    ]


def write_groups(store: Store, groups: list[list[dict[str, Any]]], name: str = "raas") -> None:
    with ShardWriter(store, name) as writer:
        for g in groups:
            for s in g:
                writer.add(s)


def set_trainer_version(store: Store, model_id: str, version: int) -> None:
    """What a trainer's publish does last: move LATEST (the weights themselves do not matter here)."""
    store.put(layout.latest_weights_key(model_id), Latest(version=version, publisher="test").model_dump_json().encode())


def roll_out_tasks(
    store: Store,
    model_id: str,
    rewards: list[float],
    raas_id: str = "raas-1",
    version: int = 0,
    limit: int | None = None,
) -> list[str]:
    """A fake rollout service: claim open tasks and commit one group per task."""
    open_ids, claimed = lake_tasks.list_tasks(store, model_id)
    done = []
    groups = []
    for task_id in sorted(open_ids - claimed)[:limit]:
        if lake_tasks.claim_task(store, model_id, task_id, raas_id, timedelta(minutes=5)) is None:
            continue
        task = lake_tasks.read_task(store, model_id, task_id)
        groups.append(
            group(
                model_id,
                rewards[: task.n_samples],
                version,
                group_id=task_id,
                task_id=task_id,
                prompt_id=task.prompt_id,
                raas_id=raas_id,
            )
        )
        done.append(task_id)
    write_groups(store, groups, raas_id)
    return done


def config(**model: Any) -> DataflowConfig:
    """One model's dataflow config; `loop` and `tasks` override the loop's and the tasks' settings. Tests
    count iterations, not seconds: an idle iteration sleeps 0.02 s (poll_s), not the default second."""
    loop = model.pop("loop", {})
    tasks = model.pop("tasks", {})
    base: dict[str, Any] = {"id": "policy", "vocab_size": 100, "n_samples": 4, "prompts_per_step": 4, "steps_ahead": 0}
    loop = {"poll_s": 0.02, "checkpoint_s": 3600, "lease_ttl_s": 30, **loop}
    return DataflowConfig.model_validate({"models": [base | model], "loop": loop, "tasks": tasks})


def now() -> datetime:
    return datetime.now(UTC)
