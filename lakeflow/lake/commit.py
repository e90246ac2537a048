"""The lake's one commit protocol, and the commit record of trajectory shards.

Everything that becomes visible by a record (a trajectory shard, a metric object, a weight version)
is written in two create-only steps: `store_object` puts the immutable object under a unique key,
then `commit` writes the small record that names it. Readers see only objects that have a record,
so a writer killed at any point leaves either nothing visible or a complete, checksummed object.
Keys embed a writer id (`new_writer_id`) and its sequence number, so writers never collide and
need no lock. `utc_now` is the writers' clock: every record's `created_at` and every dated key.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lakeflow.errors import CorruptCommitError
from lakeflow.io import Store
from lakeflow.lake import layout


def utc_now() -> datetime:
    """Now, in UTC: the clock of every writer (injected as `clock` where a test needs another)."""
    return datetime.now(UTC)


def new_writer_id(name: str) -> str:
    """A unique writer instance id, `<name>-<12 hex>`: what makes its object and record keys its own."""
    return f"{layout.check_name(name, 'writer name')[:48]}-{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class StoredObject:
    """An object written by `store_object`: stored, not yet visible."""

    key: str
    size: int  # bytes
    sha256: str  # hex digest of the bytes


def store_object(store: Store, key: str, data: bytes) -> StoredObject:
    """Step one: write `data` under its unique `key`, create-only; nothing sees it before `commit`.
    Writing the same bytes again succeeds (a retry); FileExistsError when the key holds other bytes."""
    store.put_if_absent(key, data)
    return StoredObject(key=key, size=len(data), sha256=hashlib.sha256(data).hexdigest())


def commit(store: Store, key: str, record: BaseModel, indent: int | None = None) -> None:
    """Step two: make stored objects visible by writing the record that names them (JSON), create-only.
    The same record again succeeds (a retry); FileExistsError when another record holds the key."""
    store.put_if_absent(key, record.model_dump_json(indent=indent).encode())


COMMIT_FORMAT = 1
# Bounds on what a writer may claim: a record past them is refused before anything is read.
MAX_COMMIT_BYTES = 64 << 10  # a commit record is ~1 kB; a bigger object is not one
MAX_SHARD_ROWS = 1 << 20
MAX_SHARD_BYTES = 16 << 30
MAX_VERSION = 1 << 40


class CommitRecord(BaseModel):
    """The record that makes one trajectory shard visible."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: int = Field(COMMIT_FORMAT, description="Version of this record's layout.")
    shard: str = Field(description="Key of the Parquet shard, relative to the lake root.")
    model_id: str = Field(description="Model whose samples the shard holds (one model per shard).")
    writer_id: str = Field(description="Unique id of the writer instance that produced it.")
    seq: int = Field(ge=0, description="The writer's flush number; (writer_id, seq) is unique.")
    rows: int = Field(ge=1, description="Samples in the shard.")
    size: int = Field(ge=1, description="Size of the shard object in bytes.")
    sha256: str = Field(description="Hex SHA-256 of the shard object's bytes.")
    row_groups: list[int] = Field(description="Rows in each Parquet row group, in order.")
    min_policy_version: int = Field(ge=0, description="Oldest policy_version of any sample.")
    max_policy_version: int = Field(ge=0, description="Newest max_version of any sample.")
    created_at: datetime = Field(description="Writer's clock (UTC) when the commit was made.")

    @classmethod
    def from_bytes(cls, key: str, data: bytes) -> CommitRecord:
        """Parse and check a record read from `key`: every field in range, and the shard it names a
        trajectory shard of the same model, writer and sequence number as the record and its key (a
        record cannot point anywhere else). CorruptCommitError names the key and the first problem."""
        if len(data) > MAX_COMMIT_BYTES:
            raise CorruptCommitError(f"commit record {key} is {len(data):,} bytes, over {MAX_COMMIT_BYTES:,}")
        try:
            record = cls.model_validate_json(data)
        except ValidationError as e:
            error = e.errors()[0]
            field = ".".join(str(p) for p in error["loc"]) or "record"
            raise CorruptCommitError(f"commit record {key} is not valid: {field}: {error['msg']}") from e
        problem = record._problem(key)
        if problem:
            raise CorruptCommitError(f"commit record {key} is refused: {problem}")
        return record

    def _problem(self, key: str) -> str | None:
        try:
            shard = layout.parse_shard_key(self.shard)
            commit = layout.parse_commit_key(key)
        except ValueError as e:
            return str(e)
        if (shard.model_id, shard.writer_id, shard.seq) != (self.model_id, self.writer_id, self.seq):
            return f"shard {self.shard!r} is not {self.model_id}/{self.writer_id}-{self.seq:08d}, as the record says"
        if (commit.writer_id, commit.seq) != (self.writer_id, self.seq):
            return f"the key names writer {commit.writer_id} seq {commit.seq}, the record {self.writer_id} {self.seq}"
        if self.rows > MAX_SHARD_ROWS or self.size > MAX_SHARD_BYTES:
            return (
                f"{self.rows:,} rows / {self.size:,} bytes: over {MAX_SHARD_ROWS:,} rows or {MAX_SHARD_BYTES:,} bytes"
            )
        if not self.row_groups or min(self.row_groups) < 1 or sum(self.row_groups) != self.rows:
            return f"row groups {self.row_groups[:8]} do not add up to {self.rows} rows"
        if self.min_policy_version > self.max_policy_version or self.max_policy_version > MAX_VERSION:
            return f"policy versions {self.min_policy_version}..{self.max_policy_version} are not a valid range"
        if len(self.sha256) != 64 or any(c not in "0123456789abcdef" for c in self.sha256):
            return "sha256 is not 64 lowercase hex digits"
        return None
