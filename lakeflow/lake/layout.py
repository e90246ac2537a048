"""The lake's key layout: every key and prefix lakeflow reads or writes is built here.

Keys are relative to the run's root URL (docs/architecture.md, "The lake"). Trajectory
shards use Hive-style partitions (`model=…/date=…`) so Spark, Trino, Polars and pandas
read the lake without lakeflow. Numbers in keys are zero-padded so that key order is
numeric order and a listing with `start_after` resumes where it stopped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from lakeflow.errors import InputError, LakeFormatError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

MANIFEST = "lakeflow.json"
TRAJECTORIES = "trajectories/"
COMMITS = "_commits/"
QUARANTINE = "_quarantine/"
CATALOG = "catalog/"
# The compacted trajectory table (Delta Lake): `_delta_log/` plus large Parquet files, written only by the
# dataflow process holding the lease. Outside `trajectories/`, so a listing of shards never sees it.
TABLE = "tables/trajectories"


def check_name(name: str, what: str = "name") -> str:
    """Model, writer and task ids appear in keys: letters, digits, '.', '_', '-' (max 64)."""
    if not _NAME.match(name):
        raise InputError(
            f"invalid {what} {name!r}: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


# --- trajectories and commits -------------------------------------------------------------


def shard_key(model_id: str, when: datetime, writer_id: str, seq: int) -> str:
    """An immutable trajectory shard: one writer's `seq`-th flush for one model."""
    check_name(model_id, "model id")
    check_name(writer_id, "writer id")
    return f"{TRAJECTORIES}model={model_id}/date={when:%Y-%m-%d}/{writer_id}-{seq:08d}.parquet"


def commit_key(when: datetime, writer_id: str, seq: int) -> str:
    """The commit record that makes a shard visible, ordered by the writer's clock (UTC)."""
    check_name(writer_id, "writer id")
    when = when.astimezone(UTC)
    return f"{COMMITS}{when:%Y-%m-%d}/{when:%H}/{when:%M-%S.%f}-{writer_id}-{seq:08d}.json"


@dataclass(frozen=True)
class CommitKey:
    """The parts of a commit key."""

    when: datetime
    writer_id: str
    seq: int


_COMMIT = re.compile(r"^_commits/(\d{4}-\d{2}-\d{2})/(\d{2})/(\d{2}-\d{2}\.\d{6})-(.+)-(\d{8})\.json$")


def parse_commit_key(key: str) -> CommitKey:
    """Inverse of `commit_key`; ValueError for a key that is not a commit record."""
    m = _COMMIT.match(key)
    if not m:
        raise LakeFormatError(f"not a commit record key: {key!r}")
    try:
        when = datetime.strptime(f"{m[1]} {m[2]}:{m[3]}", "%Y-%m-%d %H:%M-%S.%f").replace(tzinfo=UTC)
    except ValueError as e:
        raise LakeFormatError(f"not a commit record key (no such time): {key!r}") from e
    return CommitKey(when, check_name(m[4], "writer id"), int(m[5]))


def commits_from(when: datetime) -> str:
    """A `start_after` bound for listing: every commit stamped at or after `when` sorts after it."""
    when = when.astimezone(UTC)
    return f"{COMMITS}{when:%Y-%m-%d}/{when:%H}/{when:%M-%S.%f}"


def quarantine_key(when: datetime, source: str) -> str:
    """Rejected input with its reason; `source` is the key that was rejected."""
    name = source.replace("/", "__")
    if len(name) > 200 or not name.isprintable():  # a hostile key: keep the name short and plain
        name = "".join(c if c.isalnum() or c in "._-" else "_" for c in name[:150])
    return f"{QUARANTINE}{when:%Y-%m-%d}/{name}.json"


# --- tasks and batches (written by the dataflow process) -----------------------------------


def tasks_prefix(model_id: str) -> str:
    return f"tasks/{check_name(model_id, 'model id')}/"


def task_key(model_id: str, task_id: str) -> str:
    return f"{tasks_prefix(model_id)}{check_name(task_id, 'task id')}.parquet"


def claim_key(model_id: str, task_id: str) -> str:
    return f"{tasks_prefix(model_id)}{check_name(task_id, 'task id')}.claim"


def batches_root() -> str:
    """Parent of every model's batches prefix: listing it finds the models that have batches."""
    return "batches/"


def batches_prefix(model_id: str) -> str:
    return f"batches/{check_name(model_id, 'model id')}/"


def batch_key(model_id: str, step: int) -> str:
    return f"{batches_prefix(model_id)}{_number(step, 'step')}.parquet"


# --- weights and checkpoints (written by the trainer of each model) ------------------------


def weights_root() -> str:
    """Parent of every model's weights prefix: listing it finds the models that have weights."""
    return "weights/"


def weights_prefix(model_id: str) -> str:
    return f"weights/{check_name(model_id, 'model id')}/"


def weights_dir(model_id: str, version: int) -> str:
    """Prefix of one weight version: manifest.json plus model files or a delta."""
    return f"{weights_prefix(model_id)}{_number(version, 'version')}/"


def weights_manifest_key(model_id: str, version: int) -> str:
    return weights_dir(model_id, version) + "manifest.json"


def weights_object_key(model_id: str, version: int, name: str) -> str:
    """One file of a weight version's model directory (`model.safetensors`, `config.json`, …)."""
    if "/" in name or not name or name.startswith("."):
        raise InputError(f"invalid weight file name {name!r}")
    return weights_dir(model_id, version) + name


def weights_delta_key(model_id: str, version: int) -> str:
    """The delta of a version against the one before. In a folder of its own, so a full version's
    directory holds only the model's files: transformers and vLLM load a copy of it as it is (vLLM
    loads every top-level `*.safetensors`)."""
    return weights_dir(model_id, version) + "delta/delta.safetensors"


def latest_weights_key(model_id: str) -> str:
    """Pointer to the newest complete version; moved last, by compare-and-swap."""
    return weights_prefix(model_id) + "LATEST"


def trainer_lease_key(model_id: str) -> str:
    """The model's trainer lease: which trainer process may publish it, until when."""
    return weights_prefix(model_id) + "LEASE"


def parse_weights_version(key: str, model_id: str) -> int | None:
    """Version number of a key under `weights/<model>/<version>/`, or None."""
    rest = key.removeprefix(weights_prefix(model_id))
    head = rest.split("/", 1)[0]
    return int(head) if rest != key and head.isdigit() and "/" in rest else None


def table_log_key(version: int) -> str:
    """One commit of the compacted table's Delta log (newline-delimited JSON actions)."""
    return f"{TABLE}/_delta_log/{version:020d}.json"


def checkpoints_root() -> str:
    """Parent of every model's optimizer checkpoints: `checkpoints/<model>/<version>/…`."""
    return "checkpoints/"


def parse_checkpoint_key(key: str) -> tuple[str, int] | None:
    """(model, version) of a key under `checkpoints/<model>/<version:08d>/`, or None."""
    parts = key.split("/")
    if len(parts) < 4 or parts[0] != "checkpoints" or not parts[2].isdigit() or not _NAME.match(parts[1]):
        return None
    return parts[1], int(parts[2])


def model_checkpoints_prefix(model_id: str) -> str:
    """Every optimizer checkpoint of one model: `checkpoints/<model>/`."""
    return f"checkpoints/{check_name(model_id, 'model id')}/"


def checkpoint_prefix(model_id: str, version: int) -> str:
    return f"checkpoints/{check_name(model_id, 'model id')}/{_number(version, 'version')}/"


def checkpoint_object_key(model_id: str, version: int, name: str) -> str:
    """One object of the trainer's checkpoint for weight version `version` (`optimizer.pt`, `trainer.json`)."""
    if "/" in name or not name or name.startswith("."):
        raise InputError(f"invalid checkpoint object name {name!r}")
    return checkpoint_prefix(model_id, version) + name


# --- stats -------------------------------------------------------------------------------


def raas_stats_key(raas_id: str) -> str:
    return f"stats/raas/{check_name(raas_id, 'rollout service id')}.json"


def trainer_stats_key(model_id: str, step: int) -> str:
    return f"stats/trainer/{check_name(model_id, 'model id')}/{_number(step, 'step')}.json"


def dataset_key(name: str) -> str:
    """A dataset file `lakeflow launch --put-data` copied into the lake (the run's configs read it there)."""
    return f"data/{check_name(name, 'dataset file name')}"


def autoscale_stats_key(model_id: str) -> str:
    """The autoscaler's latest decisions for one model's rollout pool (inputs, target, reason)."""
    return f"stats/autoscale/{check_name(model_id, 'model id')}.json"


# --- workspaces (agent episodes' sandboxed workspaces, written by the rollout service) -------

WORKSPACES = "workspaces/"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_WORKSPACE = re.compile(r"^workspaces/([^/]+)/([0-9a-f]{64})\.tar\.zst$")


def workspaces_prefix(model_id: str) -> str:
    """Every stored workspace state of one model's episodes."""
    return f"{WORKSPACES}{check_name(model_id, 'model id')}/"


def workspace_key(model_id: str, sha256: str) -> str:
    """A workspace state (a base, or an episode's change against its parent), named by the SHA-256 of its
    bytes: create-only, and the same state written twice is one object."""
    if not _SHA256.match(sha256):
        raise InputError(f"a workspace state is named by a lowercase hex SHA-256, got {sha256!r}")
    return f"{workspaces_prefix(model_id)}{sha256}.tar.zst"


def parse_workspace_key(key: str) -> tuple[str, str]:
    """(model id, sha256) of a workspace state key; LakeFormatError for any other key."""
    m = _WORKSPACE.match(key)
    if not m:
        raise LakeFormatError(f"not a workspace state key (workspaces/<model>/<sha256>.tar.zst): {key!r}")
    return check_name(m[1], "model id"), m[2]


# --- repository tasks (`lakeflow tasks synth`: docs/tasks.md) ----------------------------------

REPO_TASKS = "repo_tasks/"
TASK_STATES = "tasks"  # the `workspaces/<name>/` of every suite's snapshots and mutants (same bytes: one object)


def repo_tasks_prefix(suite: str) -> str:
    """Every object of one task suite: a rows file per package and one per split."""
    return f"{REPO_TASKS}{check_name(suite, 'task suite')}/"


def repo_tasks_key(suite: str, name: str) -> str:
    """A suite's rows (JSON lines): `<package>-<version>` (one package's tasks) or a split (train, heldout)."""
    return f"{repo_tasks_prefix(suite)}{check_name(name, 'task rows name')}.jsonl"


def _number(n: int, what: str) -> str:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise InputError(f"{what} must be a non-negative integer, got {n!r}")
    return f"{n:08d}"


@dataclass(frozen=True)
class ShardKey:
    """The parts of a shard key."""

    model_id: str
    date: str
    writer_id: str
    seq: int


_SHARD = re.compile(r"^trajectories/model=([^/]+)/date=(\d{4}-\d{2}-\d{2})/(.+)-(\d{8})\.parquet$")


def is_shard_key(key: str) -> bool:
    """True for a key `shard_key` could have built."""
    try:
        parse_shard_key(key)
    except ValueError:
        return False
    return True


def parse_shard_key(key: str) -> ShardKey:
    """Inverse of `shard_key`; ValueError for a key that is not a shard."""
    m = _SHARD.match(key)
    if not m:
        raise LakeFormatError(f"not a trajectory shard key: {key!r}")
    # the ids must be names, so a key can never reach outside its partition ('..', '/')
    return ShardKey(check_name(m[1], "model id"), m[2], check_name(m[3], "writer id"), int(m[4]))


# --- the dataflow process's own objects ----------------------------------------------------

DATAFLOW_LEASE = "_dataflow/lease.json"  # who serves the lake, until when
BALANCE_REPORT = "stats/dataflow/balance.json"  # latest production/consumption balance
RAAS_STATS = "stats/raas/"
CATALOG_LATEST = f"{CATALOG}LATEST"  # pointer to the newest catalog checkpoint


def catalog_checkpoint_key(seq: int, name: str) -> str:
    """One object of catalog checkpoint `seq` (a table as Parquet, or manifest.json)."""
    if "/" in name or not name:
        raise InputError(f"invalid checkpoint object name {name!r}")
    return f"{CATALOG}checkpoints/{_number(seq, 'checkpoint')}/{name}"


def catalog_checkpoint_prefix(seq: int) -> str:
    return f"{CATALOG}checkpoints/{_number(seq, 'checkpoint')}/"


def trainer_stats_prefix(model_id: str) -> str:
    return f"stats/trainer/{check_name(model_id, 'model id')}/"


# --- metric tables (small append-only Parquet objects, each made visible by a commit record) ---

METRICS = "metrics/"


def metrics_prefix(table: str) -> str:
    """Every object of one metric table (`trainer_steps`, `rollout_stats`, `dataflow_stats`, `eval`)."""
    return f"{METRICS}{check_name(table, 'metric table')}/"


def metrics_object_key(table: str, when: datetime, writer_id: str, seq: int) -> str:
    """One flush of one writer: an immutable Parquet object, invisible until its commit record exists."""
    check_name(writer_id, "writer id")
    when = when.astimezone(UTC)
    return f"{metrics_prefix(table)}date={when:%Y-%m-%d}/{writer_id}-{_number(seq, 'seq')}.parquet"


def metrics_commit_key(table: str, writer_id: str, seq: int) -> str:
    """The commit record of a metric object (same writer and seq), written create-only after it."""
    check_name(writer_id, "writer id")
    return f"{metrics_prefix(table)}_commits/{writer_id}-{_number(seq, 'seq')}.json"


@dataclass(frozen=True)
class MetricsKey:
    """The parts of a metric object or commit key."""

    table: str
    kind: str  # 'object' or 'commit'
    writer_id: str
    seq: int


_METRICS = re.compile(r"^metrics/([^/]+)/(?:date=\d{4}-\d{2}-\d{2}/(.+)-(\d{8})\.parquet|_commits/(.+)-(\d{8})\.json)$")


def parse_metrics_key(key: str) -> MetricsKey:
    """Inverse of `metrics_object_key` / `metrics_commit_key`; ValueError for any other key."""
    m = _METRICS.match(key)
    if not m:
        raise LakeFormatError(f"not a metric object or commit key: {key!r}")
    table = check_name(m[1], "metric table")
    if m[2] is not None:
        return MetricsKey(table, "object", check_name(m[2], "writer id"), int(m[3]))
    return MetricsKey(table, "commit", check_name(m[4], "writer id"), int(m[5]))
