"""The read-only fsspec store: the reads of the `Store` protocol over file://, memory:// and http://,
the same answers as the lake's own store, and write methods that refuse with what to do."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakeflow.errors import UnsupportedStoreError
from lakeflow.io import Store, open_store, open_weights_source
from tests.weights.sources import http_server

OBJECTS = {"weights/m/LATEST": b'{"version": 1}', "weights/m/00000001/delta/d.bin": bytes(range(256)) * 40}


@pytest.fixture(params=["file", "memory", "http"])
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, Store]]:
    """(the lake's store with OBJECTS, a read-only source over the same objects)."""
    url = f"memory://src-{uuid.uuid4().hex[:8]}" if request.param == "memory" else str(tmp_path / "root")
    lake = open_store(url)
    for key, data in OBJECTS.items():
        lake.put(key, data)
    if request.param == "http":
        with http_server(str(tmp_path / "root")) as base:
            yield lake, open_weights_source(base)
    else:
        yield lake, open_weights_source(url)


def test_reads_match_the_lake(pair: tuple[Store, Store]) -> None:
    lake, source = pair
    for key, data in OBJECTS.items():
        assert source.get(key) == data
        assert source.head(key).size == len(data)
        assert source.get_range(key, 5, 1000) == data[5:1000]
        assert source.get_with_etag(key)[1] == lake.get_with_etag(key)[1]
        with source.open_read(key) as f:
            f.seek(3)
            assert f.read(4) == data[3:7]
    assert [o.key for o in source.list("weights/m/")] == sorted(OBJECTS)
    assert [o.key for o in source.list("weights/m/", start_after="weights/m/00000001/delta/d.bin")] == [
        "weights/m/LATEST"
    ]
    with pytest.raises(FileNotFoundError):
        source.get("weights/m/00000002/manifest.json")
    with pytest.raises(FileNotFoundError):
        source.head("weights/m/00000002/manifest.json")


def test_writes_are_refused_with_the_way_to_fill_it(pair: tuple[Store, Store]) -> None:
    _, source = pair
    for write in (
        lambda: source.put("a", b"x"),
        lambda: source.put_if_absent("a", b"x"),
        lambda: source.put_if_match("a", b"x", "etag"),
        lambda: source.delete("weights/m/LATEST"),
    ):
        with pytest.raises(UnsupportedStoreError, match="lakeflow weights mirror"):
            write()
    assert source.get("weights/m/LATEST") == OBJECTS["weights/m/LATEST"]


def test_unreachable_source_is_a_connection_error() -> None:
    source = open_weights_source("http://127.0.0.1:9")  # discard port: nothing listens
    with pytest.raises(ConnectionError):
        source.get("weights/m/LATEST")
