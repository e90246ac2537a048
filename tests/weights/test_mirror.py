"""Weights read from sources other than the lake: a mirror served by a static HTTP server, a second
S3 endpoint, and mirrors that are corrupt or still filling (never loaded)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import boto3
import pytest

from lakeflow.errors import UnsupportedStoreError, WeightsIntegrityError
from lakeflow.io import Store, open_mirror, open_store, open_weights_source
from lakeflow.lake import layout
from lakeflow.weights import TransferOptions, latest_version, load_state, local_version, publish, pull
from lakeflow.weights.mirror import mirror, models_in
from lakeflow.weights.retention import collect, list_versions
from lakeflow.weights.tensors import State
from tests.weights.sources import http_server
from tests.weights.weight_states import adam_step, assert_same_state, make_state

FAST = TransferOptions(part_size=4096, threads=4, attempts=2, backoff=0.0, progress=False, bandwidth=1e6, request_s=0)


@pytest.fixture
def states() -> list[State]:
    out = [make_state(scale=4)]
    for i in range(4):
        out.append(adam_step(out[-1], i))
    return out


def _publish(store: Store, states: list[State], start: int, stop: int) -> None:
    for i in range(start, stop):
        publish(store, "m", states[i], base=states[i - 1] if i else None, full_every=10)


def test_mirror_served_over_http_without_listings(tmp_path: Path, states: list[State]) -> None:
    home = open_store(str(tmp_path / "lake"))
    _publish(home, states, 0, 3)
    target = open_mirror(str(tmp_path / "mirror"))
    first = mirror(home, target, "m")
    assert (first.version, first.copied) == (2, [0, 1, 2])
    assert models_in(home) == ["m"]
    with http_server(str(tmp_path / "mirror"), listing=False) as url:
        source = open_weights_source(url)
        assert latest_version(source, "m") == 2  # LATEST and two manifests by key: no listing
        dest = str(tmp_path / "pulled")
        r = pull(source, "m", dest, options=FAST)
        assert (r.route, r.chain) == ("full", [0, 1, 2])
        assert_same_state(load_state(dest), states[2])

        _publish(home, states, 3, 5)
        again = mirror(home, target, "m")
        assert (again.version, again.copied) == (4, [3, 4])
        assert mirror(home, target, "m").copied == []  # current: nothing to do
        r = pull(source, "m", dest, options=FAST)
        assert (r.route, r.chain) == ("chain", [3, 4])
        assert_same_state(load_state(dest), states[4])

        os.unlink(tmp_path / "mirror" / layout.latest_weights_key("m"))
        assert latest_version(source, "m") is None  # no LATEST and no listing: nothing to pull, no crash
    with http_server(str(tmp_path / "mirror"), listing=True) as url:
        assert latest_version(open_weights_source(url), "m") == 4  # a server that lists: found by manifests


def test_a_corrupt_mirror_is_never_loaded(tmp_path: Path, states: list[State]) -> None:
    home = open_store(str(tmp_path / "lake"))
    _publish(home, states, 0, 2)
    mirror(home, open_mirror(str(tmp_path / "mirror")), "m")
    with http_server(str(tmp_path / "mirror")) as url:
        source = open_weights_source(url)
        dest = str(tmp_path / "pulled")
        pull(source, "m", dest, version=0, options=FAST)
        delta = tmp_path / "mirror" / layout.weights_delta_key("m", 1)
        data = bytearray(delta.read_bytes())
        data[len(data) // 2] ^= 0xFF
        delta.write_bytes(bytes(data))
        with pytest.raises(WeightsIntegrityError):
            pull(source, "m", dest, options=FAST)  # the delta fails its SHA-256, and so does the full route
        assert (local_version(dest) or {}).get("version") == 0
        assert_same_state(load_state(dest), states[0])

        full = tmp_path / "mirror" / layout.weights_object_key("m", 0, "model.safetensors")
        full.write_bytes(full.read_bytes()[:-100])  # truncated
        with pytest.raises(WeightsIntegrityError):
            pull(source, "m", str(tmp_path / "fresh"), options=FAST)
        assert not os.path.exists(tmp_path / "fresh")


def test_a_mirror_still_filling_is_retried_not_loaded(tmp_path: Path, states: list[State]) -> None:
    """Replication delivers objects late and in any order: manifests and LATEST before the delta."""
    home = open_store(str(tmp_path / "lake"))
    _publish(home, states, 0, 2)
    lake, replica = tmp_path / "lake", tmp_path / "replica"
    delta_key = layout.weights_delta_key("m", 1)
    for info in home.list("weights/"):
        if info.key != delta_key:
            (replica / info.key).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(lake / info.key, replica / info.key)
    source = open_weights_source(str(replica))
    dest = str(tmp_path / "pulled")
    pull(source, "m", dest, version=0, options=FAST)
    with pytest.raises(FileNotFoundError):
        pull(source, "m", dest, options=FAST)
    assert (local_version(dest) or {}).get("version") == 0
    (replica / delta_key).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(lake / delta_key, replica / delta_key)  # arrives later
    assert pull(source, "m", dest, options=FAST).chain == [1]
    assert_same_state(load_state(dest), states[1])


@pytest.mark.s3
def test_mirror_to_a_second_s3_endpoint(tmp_path: Path, states: list[State], second_s3_endpoint: str) -> None:
    endpoint = second_s3_endpoint
    keys = {"aws_access_key_id": "region2", "aws_secret_access_key": "region2"}
    boto3.client("s3", endpoint_url=endpoint, region_name="eu-west-1", **keys).create_bucket(
        Bucket="weights-eu", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"}
    )
    options = {"endpoint_url": endpoint, "key": "region2", "secret": "region2"}
    home = open_store(str(tmp_path / "lake"))
    _publish(home, states, 0, 3)
    url = "s3://weights-eu/mirror"
    assert mirror(home, open_mirror(url, options), "m").version == 2
    source = open_weights_source(url, options)
    with pytest.raises(UnsupportedStoreError, match="lakeflow weights mirror"):
        source.put_if_absent("weights/m/LATEST", b"{}")
    dest = str(tmp_path / "pulled")
    r = pull(source, "m", dest, options=FAST)
    assert r.version == 2 and r.bytes_fetched > 0
    assert_same_state(load_state(dest), states[2])


def test_cli_mirror_then_pull_from_the_mirror(tmp_path: Path, states: list[State]) -> None:
    from click.testing import CliRunner

    from lakeflow.cli import main

    lake, mirror_dir, dest = str(tmp_path / "lake"), str(tmp_path / "mirror"), str(tmp_path / "pulled")
    _publish(open_store(lake), states, 0, 2)
    done = CliRunner().invoke(main, ["weights", "mirror", "--lake", lake, "--to", mirror_dir], catch_exceptions=False)
    assert done.exit_code == 0 and "m: mirror at version 1" in done.output
    args = ["weights", "pull", "--weights-url", mirror_dir, "--model", "m", "--dest", dest]
    done = CliRunner().invoke(main, args, catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert_same_state(load_state(dest), states[1])
    done = CliRunner().invoke(main, ["weights", "pull", "--model", "m", "--dest", dest], env={"LAKEFLOW_LAKE": ""})
    assert done.exit_code == 2 and "--weights-url" in done.output


def test_versions_the_lake_collected_leave_the_mirror(tmp_path: Path, states: list[State]) -> None:
    home = open_store(str(tmp_path / "lake"))
    target = open_mirror(str(tmp_path / "mirror"))
    _publish(home, states, 0, 3)
    assert mirror(home, target, "m").removed == []
    publish(home, "m", states[3], full_every=1)  # a full version: 0-2 are no longer needed by the newest
    publish(home, "m", states[4], base=states[3], full_every=10)
    gone = collect(home, "m", keep=1, keep_base=False)
    assert gone == [0, 1, 2]
    kept = mirror(home, target, "m", prune=False)
    assert kept.removed == [] and list_versions(target, "m") == [0, 1, 2, 3, 4]
    r = mirror(home, target, "m")
    assert r.removed == gone and list_versions(target, "m") == list_versions(home, "m")
    for v in gone:
        assert not list(target.list(layout.weights_dir("m", v)))
    dest = str(tmp_path / "pulled")
    assert pull(target, "m", dest, options=FAST).version == 4  # what is left still pulls
    assert_same_state(load_state(dest), states[4])
