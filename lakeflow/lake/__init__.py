"""The trajectory lake: key layout, the sample schema, the shard writer and the reader."""

from lakeflow.lake.commit import CommitRecord
from lakeflow.lake.reader import CommitCursor, LakeReader, Poll, SampleRef, iter_commits
from lakeflow.lake.schema import METADATA_COLUMNS, PAYLOAD_COLUMNS, SAMPLE_SCHEMA
from lakeflow.lake.writer import ShardWriter, write_samples

__all__ = [
    "METADATA_COLUMNS",
    "PAYLOAD_COLUMNS",
    "SAMPLE_SCHEMA",
    "CommitCursor",
    "CommitRecord",
    "LakeReader",
    "Poll",
    "SampleRef",
    "ShardWriter",
    "iter_commits",
    "write_samples",
]
