"""Who may do what to which keys of a lake: the grants of the lakeflow roles.

Patterns are relative to the lake's root and come from `lakeflow.lake.layout` (the one owner of
every key), with each id or number replaced by `*` (IAM's wildcard, which also matches `/`).
Verbs, from weakest to strongest write:
- `list`: list keys under the pattern (s3:ListBucket restricted by `s3:prefix`);
- `read`: get an object or a byte range of it (s3:GetObject, also HEAD);
- `create`: a create-only write (s3:PutObject that must carry `If-None-Match: *`);
- `swap`: create-only, or replace by compare-and-swap (s3:PutObject with If-None-Match or If-Match);
- `write`: any put, including a blind overwrite (s3:PutObject);
- `delete`: remove an object (s3:DeleteObject).
No role needs multipart uploads (nothing calls `Store.put_file`), so none may start or abort one.
Each grant names the code that needs it; tests/infra checks the code against the grants.

The roles of one model (`PER_MODEL`: a trainer, a rollout pool) have patterns with MODEL where the
model id goes: a policy for model `m` puts `m` there (one identity per model: nothing it writes
reaches another model's keys), a policy for every model `*`, and Terraform's template `${model}`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from lakeflow.errors import InputError
from lakeflow.lake import layout

Role = Literal["raas", "dataflow", "trainer", "eval", "analyst"]
Verb = Literal["list", "read", "create", "swap", "write", "delete"]

ROLES: tuple[Role, ...] = ("raas", "dataflow", "trainer", "eval", "analyst")
PER_MODEL: tuple[Role, ...] = ("raas", "trainer")  # scoped to one model when a policy names one
MODEL = "${model}"  # the model id in the patterns of PER_MODEL roles (Terraform's template variable)
VERBS: tuple[Verb, ...] = ("list", "read", "create", "swap", "write", "delete")

ROLE_SUMMARY: dict[Role, str] = {
    "raas": "rollout service (`lakeflow raas`; `lakeflow synth` needs the same writes)",
    "dataflow": "the dataflow process (`lakeflow dataflow`)",
    "trainer": "one trainer per model (`lakeflow train`, `lakeflow weights publish|gc`)",
    "eval": "the evaluation service (`lakeflow eval`): scores published versions",
    "analyst": "read-only analysis (`lakeflow sql|status|report`, `lakeflow weights ls|pull|verify`)",
}

# Sample ids and numbers fed to the layout functions, then replaced by `*`.
_MODEL, _TASK, _RAAS = "m0d3l", "t4sk", "r4as"
_NUMBER = "00000000"  # the layout's zero-padded 0


def glob(key: str) -> str:
    """A layout key or prefix built from the sample ids above, as an IAM pattern."""
    for sample in (_MODEL, _TASK, _RAAS, _NUMBER):
        key = key.replace(sample, "*")
    return key + "*" if key.endswith("/") else key


def scoped(key: str) -> str:
    """Like `glob`, with MODEL where the model id goes (for the grants of PER_MODEL roles)."""
    return glob(key.replace(_MODEL, MODEL))


@dataclass(frozen=True)
class Grant:
    """One permission: `role` may `verb` the keys matching `pattern` (relative to the lake root)."""

    role: Role
    verb: Verb
    pattern: str
    why: str


TRAJECTORIES = glob(layout.TRAJECTORIES)
COMMITS = glob(layout.COMMITS)
QUARANTINE = glob(layout.QUARANTINE)
TASKS = glob("tasks/")
TASK_OBJECTS = glob(layout.tasks_prefix(_MODEL))
TASK = glob(layout.task_key(_MODEL, _TASK))
CLAIM = glob(layout.claim_key(_MODEL, _TASK))
BATCHES = glob(layout.batches_root())
WEIGHTS = glob(layout.weights_root())
LATEST = glob(layout.latest_weights_key(_MODEL))
MANIFESTS = glob(layout.weights_manifest_key(_MODEL, 0))
TABLES = glob(layout.TABLE) if layout.TABLE.endswith("/") else glob(layout.TABLE + "/")
CHECKPOINTS = glob(layout.checkpoint_prefix(_MODEL, 0)).split("*", 1)[0] + "*"
CATALOG = glob(layout.CATALOG)
CATALOG_CHECKPOINTS = glob(layout.catalog_checkpoint_prefix(0))
LEASE = layout.DATAFLOW_LEASE
BALANCE = layout.BALANCE_REPORT
RAAS_STATS = glob(layout.raas_stats_key(_RAAS))
TRAINER_STATS = glob(layout.trainer_stats_prefix(_MODEL)).split("*", 1)[0] + "*"
EVERYTHING = "*"
WORKSPACES = glob(layout.WORKSPACES)
ROLLOUT_METRICS = glob(layout.metrics_prefix("rollout_stats"))
DATAFLOW_METRICS = glob(layout.metrics_prefix("dataflow_stats"))
TRAINER_METRICS = glob(layout.metrics_prefix("trainer_steps"))
EVAL_METRICS = glob(layout.metrics_prefix("eval"))
# the same keys, of one model (PER_MODEL roles)
MODEL_TASKS = scoped(layout.tasks_prefix(_MODEL))
MODEL_CLAIM = scoped(layout.claim_key(_MODEL, _TASK))
MODEL_SHARDS = scoped(layout.shard_key(_MODEL, datetime(2000, 1, 1), _RAAS, 0).rsplit("/", 2)[0] + "/")
MODEL_BATCHES = scoped(layout.batches_prefix(_MODEL))
MODEL_WEIGHTS = scoped(layout.weights_prefix(_MODEL))
MODEL_CHECKPOINTS = scoped(layout.checkpoint_prefix(_MODEL, 0).rsplit("/", 2)[0] + "/")
MODEL_TRAINER_STATS = scoped(layout.trainer_stats_prefix(_MODEL))
MODEL_WORKSPACES = scoped(layout.workspaces_prefix(_MODEL))

GRANTS: tuple[Grant, ...] = (
    # --- rollout service: lakeflow/raas/service/loop.py, lakeflow/lake/tasks.py, lakeflow/lake/writer.py
    Grant("raas", "list", MODEL_TASKS, "finds open tasks and claims of its model (lake.tasks.list_tasks)"),
    Grant("raas", "list", WEIGHTS, "finds the newest manifest when LATEST is missing or wrong (latest_version)"),
    Grant("raas", "read", MODEL_TASKS, "reads a claimed task and its claim (read_task, read_claim)"),
    Grant("raas", "read", WEIGHTS, "pulls published weights: LATEST, manifests, ranged object reads"),
    Grant("raas", "read", TRAJECTORIES, "a retried create-only write compares the bytes already there"),
    Grant("raas", "read", COMMITS, "a retried create-only write compares the bytes already there"),
    Grant("raas", "create", MODEL_SHARDS, "ShardWriter: each shard of its model, create-only"),
    Grant("raas", "create", COMMITS, "ShardWriter: the commit record that makes a shard visible"),
    Grant("raas", "swap", MODEL_CLAIM, "claims a task create-only, renews the claim by compare-and-swap"),
    Grant("raas", "write", RAAS_STATS, "its heartbeat, overwritten every heartbeat_s"),
    Grant("raas", "create", ROLLOUT_METRICS, "its rollout_stats metric rows (object, then commit record)"),
    Grant("raas", "read", ROLLOUT_METRICS, "a retried create-only write compares the bytes already there"),
    Grant("raas", "delete", MODEL_CLAIM, "drops its own claim on a task released between listing and claiming"),
    Grant(
        "raas",
        "create",
        MODEL_WORKSPACES,
        "sandboxed agent episodes: each base and each episode's change, create-only (raas/workspace/lake_states.py)",
    ),
    Grant(
        "raas",
        "read",
        WORKSPACES,
        "a pool whose workspace is a stored state (lake://, a fork of any model's episode); a retried create-only "
        "write compares the bytes already there",
    ),
    # --- dataflow process: lakeflow/dataflow/*
    Grant("dataflow", "list", COMMITS, "tails commit records (LakeReader.poll)"),
    Grant("dataflow", "list", TASKS, "rebuilds outstanding tasks and claims (TaskIssuer.sync)"),
    Grant("dataflow", "list", BATCHES, "adopts batch objects written before a crash"),
    Grant("dataflow", "list", glob(layout.RAAS_STATS), "balance report: rollout heartbeats"),
    Grant("dataflow", "list", TRAINER_STATS, "balance report: trainer step records"),
    Grant("dataflow", "read", COMMITS, "ingest: commit records"),
    Grant("dataflow", "read", TRAJECTORIES, "ingest: committed shards"),
    Grant("dataflow", "read", TASK_OBJECTS, "task objects and claims (expiry)"),
    Grant("dataflow", "read", BATCHES, "adopts batch objects written before a crash"),
    Grant("dataflow", "read", LATEST, "the trainer's newest version (serving runs ahead of it)"),
    Grant("dataflow", "read", MANIFESTS, "checks LATEST against the manifests (latest_version): no rollback"),
    Grant("dataflow", "list", WEIGHTS, "finds the newest manifest when LATEST is missing or wrong (latest_version)"),
    Grant("dataflow", "read", CATALOG, "restores the newest catalog checkpoint"),
    Grant("dataflow", "read", LEASE, "the serving lease"),
    Grant("dataflow", "read", glob(layout.RAAS_STATS), "balance report: rollout heartbeats"),
    Grant("dataflow", "read", TRAINER_STATS, "balance report: trainer step records"),
    Grant("dataflow", "create", TASK, "issues tasks create-only"),
    Grant("dataflow", "create", BATCHES, "writes each step's batch create-only (the record of consumption)"),
    Grant("dataflow", "swap", LEASE, "takes and renews the serving lease by compare-and-swap"),
    Grant("dataflow", "write", QUARANTINE, "records rejected input"),
    Grant("dataflow", "write", CATALOG, "catalog checkpoints and catalog/LATEST"),
    Grant("dataflow", "write", BALANCE, "the balance report, overwritten"),
    Grant("dataflow", "create", DATAFLOW_METRICS, "its dataflow_stats metric rows (object, then commit record)"),
    Grant("dataflow", "read", DATAFLOW_METRICS, "a retried create-only write compares the bytes already there"),
    Grant("dataflow", "read", BALANCE, "copies its balance report into dataflow_stats"),
    Grant("dataflow", "list", TABLES, "the compacted table's log (compaction, lakeflow sql's snapshot)"),
    Grant("dataflow", "read", TABLES, "the compacted table's log and files"),
    Grant(
        "dataflow",
        "write",
        TABLES,
        "compaction: Parquet files, then the next Delta log entry (single committer: the lease)",
    ),
    Grant("dataflow", "list", TRAJECTORIES, "retention: orphan and compacted shards"),
    Grant(
        "dataflow",
        "delete",
        TRAJECTORIES,
        "retention: orphan shards after a grace period, compacted sources after theirs",
    ),
    Grant("dataflow", "delete", COMMITS, "retention: commit records of compacted shards"),
    Grant("dataflow", "list", CHECKPOINTS, "retention: optimizer checkpoints"),
    Grant(
        "dataflow", "delete", CHECKPOINTS, "retention: optimizer checkpoints beyond the newest K (never the resume's)"
    ),
    Grant("dataflow", "list", QUARANTINE, "retention: old quarantine records"),
    Grant("dataflow", "delete", QUARANTINE, "retention: quarantine records after N days"),
    Grant("dataflow", "delete", TASK_OBJECTS, "releases finished tasks (task and claim), reopens expired claims"),
    Grant("dataflow", "delete", CATALOG_CHECKPOINTS, "drops superseded copies of mutable catalog tables"),
    # --- trainer: lakeflow/trainer/*, lakeflow/weights/publish.py, lakeflow/weights/retention.py
    Grant("trainer", "list", MODEL_WEIGHTS, "resumes from the newest manifest (latest_version); gc lists versions"),
    Grant("trainer", "read", MODEL_BATCHES, "reads the batch of each step"),
    Grant("trainer", "read", MODEL_SHARDS, "reads the samples a batch names, by ranged reads"),
    Grant("trainer", "read", MODEL_WEIGHTS, "resumes from the newest version; codes deltas against the previous one"),
    Grant("trainer", "read", MODEL_CHECKPOINTS, "resumes its optimizer state"),
    Grant(
        "trainer",
        "write",
        MODEL_WEIGHTS,
        "publishes versions (create-only, LATEST by compare-and-swap) and holds the model's lease (LEASE); the "
        "first publish after a start may overwrite leftovers of a crashed one (force, only under the lease)",
    ),
    Grant("trainer", "write", MODEL_CHECKPOINTS, "optimizer checkpoint of each version"),
    Grant("trainer", "write", MODEL_TRAINER_STATS, "one stats record per step"),
    Grant("trainer", "create", TRAINER_METRICS, "its trainer_steps metric rows (object, then commit record)"),
    Grant("trainer", "read", TRAINER_METRICS, "a retried create-only write compares the bytes already there"),
    Grant("trainer", "delete", MODEL_WEIGHTS, "`lakeflow weights gc` (retention), run with the trainer's credentials"),
    # --- evaluation service: lakeflow/evaluation/service.py
    Grant("eval", "list", WEIGHTS, "finds the newest manifest when LATEST is missing or wrong (latest_version)"),
    Grant("eval", "read", WEIGHTS, "pulls each version it scores"),
    Grant("eval", "list", EVAL_METRICS, "resumes: the versions already scored (read_metrics)"),
    Grant("eval", "read", EVAL_METRICS, "resumes: the versions already scored (read_metrics)"),
    Grant("eval", "create", EVAL_METRICS, "its eval metric rows (object, then commit record)"),
    # --- analyst: lakeflow/lakeview/ (sql), lakeflow/dataflow/status.py, lakeflow/report/*
    Grant("analyst", "list", EVERYTHING, "sql, status and report list the lake"),
    Grant("analyst", "read", EVERYTHING, "sql, status and report read the lake"),
)


def grants_for(role: str, model: str | None = None) -> list[Grant]:
    """The grants of one role, for one model's identity (`model`; PER_MODEL roles) or for every model
    (None; MODEL becomes `*`, or stays as it is when `model` is MODEL itself: a Terraform template).
    ValueError for an unknown role or a bad model id."""
    if role not in ROLES:
        raise InputError(f"unknown role {role!r}: use one of {', '.join(ROLES)}")
    if model is not None and model != MODEL:
        layout.check_name(model, "model id")
    fill = "*" if model is None else model
    return [Grant(g.role, g.verb, g.pattern.replace(MODEL, fill), g.why) for g in GRANTS if g.role == role]
