"""`python -m benchmarks loop` end to end with small settings: the JSON's structure, positive numbers."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from benchmarks.loop_run import bench_loop


# Over 60 s (~70 s, in process, traced): the benchmark's six sections at their smallest settings (2 trainer
# steps, 512 samples to S3, a 2M-parameter codec state), so its README numbers cannot rot unseen.
@pytest.mark.slow
def test_bench_loop_json() -> None:
    args = ["--steps", "2", "--s3-samples", "512", "--s3-batch", "128", "--codec-params", "2000000", "--json"]
    result = CliRunner().invoke(bench_loop, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    for section, keys in {
        "lake": ["wall_per_step_s", "median_load_s", "median_publish_s", "io_share", "background_share"],
        "lake_inline": ["wall_per_step_s", "median_load_s", "median_publish_s", "io_share", "background_share"],
        "sync": ["median_iteration_s", "median_generate_s"],
        "s3": ["stored_bytes_per_token", "read_mbps", "write_mbps"],
        "codec": ["snapshot_gbps", "encode_gbps", "synthetic_bytes_per_param", "real_bytes_per_param"],
        "projection": ["load_s", "encode_s", "upload_s", "publish_s", "share", "snapshot_s", "writer_s"],
    }.items():
        for key in keys:
            assert out[section][key] > 0, (section, key)
    assert out["lake"]["steps"] == out["lake_inline"]["steps"] == 2
    # in line, every byte of lake I/O blocks the trainer; overlapped, only part of it does
    assert out["lake_inline"]["io_share"] > out["lake_inline"]["background_share"]
    assert out["lake"]["io_share"] > 0
    assert [g["limit"] for g in out["goals"]] == [0.05, 0.01]
    assert all(isinstance(g["met"], bool) for g in out["goals"])
