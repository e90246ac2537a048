"""Shard writer and lake reader on every backend: commit visibility, tailing, reads by reference."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from lakeflow.errors import CorruptShardError, SampleValidationError
from lakeflow.io import Store
from lakeflow.lake import (
    CommitCursor,
    LakeReader,
    SampleRef,
    ShardWriter,
    iter_commits,
    layout,
    write_samples,
)
from lakeflow.lake.synth import SynthSpec, write_synthetic
from tests.lake.helpers import CountingStore, sample


def test_written_samples_are_read_back_by_reference(store: Store) -> None:
    samples = [sample(sample_id=f"s{i}", model_id="a" if i % 3 else "b", reward=float(i)) for i in range(50)]
    commits = write_samples(store, samples)
    assert sorted(c.model_id for c in commits) == ["a", "b"]
    assert sum(c.rows for c in commits) == 50
    reader = LakeReader(store)
    refs = []
    for c in commits:
        table = reader.read_shard(c, columns=["sample_id"])
        refs += [SampleRef(c.shard, row, sid) for row, sid in enumerate(table.column("sample_id").to_pylist())]
    refs.sort(key=lambda r: r.sample_id or "", reverse=True)
    got = reader.read_samples(refs, columns=["reward"])
    assert got.column_names == ["reward"]
    assert got.column("reward").to_pylist() == [float(r.sample_id[1:]) for r in refs]  # type: ignore[index]
    full = reader.read_samples(refs[:2])
    assert full.schema.names[:2] == ["sample_id", "episode_id"]
    assert full.column("response_ids").to_pylist()[0] == [0, 1, 2, 3]


def test_shards_have_row_groups_and_commit_records_describe_them(store: Store) -> None:
    with ShardWriter(store, "w", max_rows=100, row_group_rows=32) as writer:
        for i in range(250):
            writer.add(sample(sample_id=str(i)))
    commits = [c for _, c in iter_commits(LakeReader(store))]
    assert [c.rows for c in commits] == [100, 100, 50]
    assert commits[0].row_groups == [32, 32, 32, 4]
    for c in commits:
        data = store.get(c.shard)
        assert len(data) == c.size and hashlib.sha256(data).hexdigest() == c.sha256
        assert layout.parse_shard_key(c.shard).model_id == "policy"


def test_reading_one_sample_reads_only_its_row_group(store: Store) -> None:
    (commit,) = write_synthetic(store, SynthSpec(2048), max_rows=2048)
    counting = CountingStore(store)
    table = LakeReader(counting).read_samples([SampleRef(commit.shard, 1500)], columns=["response_ids"])  # type: ignore[arg-type]
    assert table.num_rows == 1
    assert counting.bytes_read < commit.size / 8, (counting.bytes_read, commit.size)


def test_tailing_with_a_cursor_returns_each_commit_once(store: Store) -> None:
    reader = LakeReader(store)
    first = reader.poll()
    assert first.commits == [] and first.cursor == CommitCursor()
    write_samples(store, [sample() for _ in range(3)])
    second = reader.poll(first.cursor)
    assert len(second.commits) == 1
    cursor = CommitCursor.from_json(second.cursor.to_json())
    assert reader.poll(cursor).commits == []
    write_samples(store, [sample()])
    write_samples(store, [sample()])
    third = reader.poll(cursor)
    assert len(third.commits) == 2
    assert reader.poll(third.cursor).commits == []


def test_a_late_commit_inside_the_settle_window_is_found(store: Store) -> None:
    reader = LakeReader(store, settle=timedelta(minutes=2))
    write_samples(store, [sample()])
    cursor = reader.poll().cursor
    late = datetime.now(UTC) - timedelta(seconds=60)  # a writer whose clock runs a minute behind
    with ShardWriter(store, "slow", clock=lambda: late) as writer:
        writer.add(sample())
    result = reader.poll(cursor)
    assert [c.writer_id.startswith("slow") for _, c in result.commits] == [True]
    assert reader.poll(result.cursor).commits == []


def test_an_uncommitted_shard_is_invisible(store: Store) -> None:
    writer = ShardWriter(store, "crashy")
    table = pa.Table.from_pylist([sample()])
    pending = writer.write_shard(writer_table(table))
    reader = LakeReader(store)
    assert reader.poll().commits == []
    shards, skipped = reader.visible_shards()
    assert shards == [] and skipped == [(pending.key, "no commit record (uncommitted or abandoned write)")]
    writer.commit(pending)
    assert [c.shard for _, c in reader.poll().commits] == [pending.key]


def writer_table(table: pa.Table) -> pa.Table:
    from lakeflow.lake.schema import SAMPLE_SCHEMA, normalize_sample, samples_to_table

    return samples_to_table([normalize_sample(r, i) for i, r in enumerate(table.to_pylist())]).cast(SAMPLE_SCHEMA)


def test_a_retried_commit_is_not_a_duplicate(store: Store) -> None:
    writer = ShardWriter(store, "retry", clock=lambda: datetime(2026, 1, 1, tzinfo=UTC))
    pending = writer.write_shard(writer_table(pa.Table.from_pylist([sample()])))
    writer.commit(pending)
    writer.commit(pending)  # the reply to the first attempt was lost; same key, same bytes
    assert len(LakeReader(store).poll().commits) == 1


def test_corrupt_commit_records_are_skipped_with_a_reason(store: Store) -> None:
    write_samples(store, [sample()])
    store.put("_commits/2026-01-01/00/00-00.000000-evil-00000001.json", b"{not json")
    store.put("_commits/README.txt", b"hello")
    result = LakeReader(store).poll()
    assert len(result.commits) == 1
    reasons = dict(result.skipped)
    assert "is not valid" in reasons["_commits/2026-01-01/00/00-00.000000-evil-00000001.json"]
    assert reasons["_commits/README.txt"] == "not a commit record key"


def test_a_corrupt_or_missing_shard_raises_a_clear_error(store: Store) -> None:
    (commit,) = write_samples(store, [sample() for _ in range(10)])
    reader = LakeReader(store)
    data = bytearray(store.get(commit.shard))
    data[len(data) // 2] ^= 0xFF
    store.put(commit.shard, bytes(data))
    with pytest.raises(CorruptShardError, match="does not match its commit record"):
        reader.read_shard(commit)
    store.put(commit.shard, b"PAR1 this is not parquet")
    with pytest.raises(CorruptShardError, match="cannot be read as Parquet"):
        reader.read_samples([SampleRef(commit.shard, 0)])
    store.delete(commit.shard)
    with pytest.raises(CorruptShardError, match="committed but missing"):
        reader.read_shard(commit)


def test_reference_checks(store: Store) -> None:
    (commit,) = write_samples(store, [sample(sample_id="x"), sample(sample_id="y")])
    reader = LakeReader(store)
    with pytest.raises(CorruptShardError, match="holds 'y', expected 'x'"):
        reader.read_samples([SampleRef(commit.shard, 1, "x")])
    with pytest.raises(CorruptShardError, match="out of range"):
        reader.read_samples([SampleRef(commit.shard, 2)])
    assert reader.read_samples([]).num_rows == 0


def test_bad_input_to_the_writer(store: Store) -> None:
    writer = ShardWriter(store, "w")
    with pytest.raises(SampleValidationError, match="row 0"):
        writer.add(sample(reward=float("nan")))
    writer.add(sample())
    with pytest.raises(SampleValidationError, match=r"row 2 .*'loss_mask'"):
        writer.add(sample(loss_mask=[1]))
    assert writer.write_table(writer_table(pa.Table.from_pylist([sample()])).slice(0, 0)) == []  # empty: nothing
    with pytest.raises(ValueError, match="invalid writer name"):
        ShardWriter(store, "bad/name")
    with pytest.raises(ValueError, match="invalid model id"):
        writer.add(sample(model_id="../etc"))
    assert len(writer.flush()) == 1
