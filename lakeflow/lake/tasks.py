"""Task and claim records: the prompts the dataflow process issues and the rollout services take.

Only the dataflow process writes task objects. A rollout service claims a task by creating
its claim object with a create-only write (exactly one claimant wins), renews it with a
compare-and-swap before it expires, and abandons the task when a renewal fails (the
dataflow process reissued it). A finished task is recognised by samples carrying its id.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lakeflow.errors import EtagMismatchError, LakeflowError
from lakeflow.io import Store
from lakeflow.lake import layout


class Task(BaseModel):
    """One prompt to roll out `n_samples` times."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: str = Field(description="Unique id; a reissue after an expired claim gets a new one.")
    model_id: str = Field(description="Model whose rollout service takes the task.")
    prompt_id: str = Field(description="Id of the prompt in the run's dataset.")
    prompt: str = Field(description="The prompt text (or a JSON list of chat messages).")
    answer: str = Field("", description="Reference answer for the reward, if the task has one.")
    n_samples: int = Field(ge=1, description="Completions to generate (the group size).")
    task_type: str = Field("", description="Reward family, e.g. 'math'.")
    dataset: str = Field("", description="Dataset the prompt came from.")
    attempt: int = Field(0, ge=0, description="0 for the first issue, +1 for every reissue.")
    issued_at: datetime = Field(description="When the dataflow process issued it (UTC).")


class Claim(BaseModel):
    """Who is rolling a task out, until when."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: str
    raas_id: str
    claimed_at: datetime
    expires_at: datetime

    def expired(self, now: datetime) -> bool:
        return now >= self.expires_at


def write_task(store: Store, task: Task) -> str:
    """Store a task object (create-only); returns its key."""
    key = layout.task_key(task.model_id, task.task_id)
    table = pa.Table.from_pylist([task.model_dump(mode="json")])
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    store.put_if_absent(key, buffer.getvalue())
    return key


def read_task(store: Store, model_id: str, task_id: str) -> Task:
    """A task object; FileNotFoundError when it was finished or reissued."""
    data = store.get(layout.task_key(model_id, task_id))
    try:
        return Task.model_validate(pq.read_table(io.BytesIO(data)).to_pylist()[0])
    except (pa.ArrowInvalid, IndexError, ValidationError) as e:
        raise LakeflowError(f"task object {task_id} of {model_id} is corrupt: {e}") from e


def list_tasks(store: Store, model_id: str) -> tuple[set[str], set[str]]:
    """Ids of the open task objects and of the tasks that have a claim, from one listing."""
    tasks, claims = set(), set()
    prefix = layout.tasks_prefix(model_id)
    for info in store.list(prefix):
        name = info.key[len(prefix) :]
        if name.endswith(".parquet"):
            tasks.add(name.removesuffix(".parquet"))
        elif name.endswith(".claim"):
            claims.add(name.removesuffix(".claim"))
    return tasks, claims


def claim_task(store: Store, model_id: str, task_id: str, raas_id: str, ttl: timedelta) -> Claim | None:
    """Take a task; None when another rollout service holds it."""
    now = datetime.now(UTC)
    claim = Claim(task_id=task_id, raas_id=raas_id, claimed_at=now, expires_at=now + ttl)
    try:
        store.put_if_absent(layout.claim_key(model_id, task_id), claim.model_dump_json().encode())
    except FileExistsError:
        return None
    return claim


def read_claim(store: Store, model_id: str, task_id: str) -> tuple[Claim, str] | None:
    """The claim on a task and its etag, or None when unclaimed."""
    try:
        data, etag = store.get_with_etag(layout.claim_key(model_id, task_id))
    except FileNotFoundError:
        return None
    try:
        return Claim.model_validate(json.loads(data)), etag
    except (ValueError, ValidationError) as e:
        raise LakeflowError(f"claim on {task_id} of {model_id} is corrupt: {e}") from e


def renew_claim(store: Store, model_id: str, claim: Claim, etag: str, ttl: timedelta) -> tuple[Claim, str] | None:
    """Extend a claim; None when it was taken away (the caller must abandon the task)."""
    renewed = claim.model_copy(update={"expires_at": datetime.now(UTC) + ttl})
    try:
        new_etag = store.put_if_match(
            layout.claim_key(model_id, claim.task_id), renewed.model_dump_json().encode(), etag
        )
    except (FileNotFoundError, EtagMismatchError):
        return None
    return renewed, new_etag


def give_up_claim(store: Store, model_id: str, claim: Claim, etag: str) -> bool:
    """Expire a claim now (compare-and-swap on its etag), so the dataflow reissues the task at its next look
    at claims instead of when the claim would have run out; False when it was no longer this holder's."""
    expired = claim.model_copy(update={"expires_at": datetime.now(UTC)})
    try:
        store.put_if_match(layout.claim_key(model_id, claim.task_id), expired.model_dump_json().encode(), etag)
    except (FileNotFoundError, EtagMismatchError):
        return False
    return True


def release_task(store: Store, model_id: str, task_id: str) -> None:
    """Remove a task and its claim (finished, or to reissue it under a new id)."""
    store.delete(layout.task_key(model_id, task_id))
    store.delete(layout.claim_key(model_id, task_id))
