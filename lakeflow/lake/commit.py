"""The commit record: the small object that makes one trajectory shard visible.

A shard is written first under a unique key; its commit record is written last with a
create-only write. Readers see only shards that have a commit record, so a writer killed
at any point leaves either nothing visible or a complete, checksummed shard.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lakeflow.errors import CorruptCommitError

COMMIT_FORMAT = 1


class CommitRecord(BaseModel):
    """One committed shard."""

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

    def to_bytes(self) -> bytes:
        return self.model_dump_json().encode()

    @classmethod
    def from_bytes(cls, key: str, data: bytes) -> CommitRecord:
        try:
            return cls.model_validate_json(data)
        except ValidationError as e:
            raise CorruptCommitError(f"commit record {key} is not valid: {e.errors()[0]['msg']}") from e
