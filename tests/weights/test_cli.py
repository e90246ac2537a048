"""`lakeflow weights …` and `lakeflow bench weights` through click's test runner."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from lakeflow.cli import main
from lakeflow.cli import weights as weights_cli
from lakeflow.cli.weights import bench_weights, weights
from lakeflow.io import open_store
from lakeflow.weights import codec, load_state, publish
from lakeflow.weights.tensors import write_safetensors
from tests.weights.weight_states import adam_step, assert_same_state, make_state


def run(*args: str) -> str:
    result = CliRunner().invoke(weights, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture
def lake(lake_url: str) -> str:
    if lake_url.startswith("memory://"):
        pytest.skip("each CLI call is a new process in real use; a memory lake is per process")
    return lake_url


def test_publish_pull_ls_verify_gc(lake: str, tmp_path: str) -> None:
    states = [make_state()]
    for i in range(3):
        states.append(adam_step(states[-1], i))
    src = os.path.join(tmp_path, "src")
    os.makedirs(src)
    with open(os.path.join(src, "config.json"), "w") as f:
        f.write('{"model_type": "toy"}')
    for i, s in enumerate(states):
        write_safetensors(os.path.join(src, "model.safetensors"), s)
        out = run("publish", "--lake", lake, "--model", "m", src, "--full-every", "3")
        assert f"version {i} ({'full' if i % 3 == 0 else 'delta'}" in out
    listing = run("ls", "--lake", lake, "--model", "m")
    assert "<- newest" in listing and listing.count("delta") >= 2
    dest = os.path.join(tmp_path, "dest")
    assert "version 2" in run("pull", "--lake", lake, "--model", "m", "--dest", dest, "--version", "2")
    assert_same_state(load_state(dest), states[2])
    assert "version 3" in run("pull", "--lake", lake, "--model", "m", "--dest", dest)
    assert_same_state(load_state(dest), states[3])
    assert "ok" in run("verify", "--lake", lake, "--model", "m")
    assert "would delete 0" in run("gc", "--lake", lake, "--model", "m", "--keep", "2", "--dry-run")
    single = os.path.join(tmp_path, "one.safetensors")
    write_safetensors(single, adam_step(states[3], 9))
    assert "version 4 (delta" in run("publish", "--lake", lake, "--model", "m", single)
    assert "deleted 2 version(s): [1, 2]" in run("gc", "--lake", lake, "--model", "m", "--keep", "2")
    assert "deleted 1 version(s): [0]" in run("gc", "--lake", lake, "--model", "m", "--keep", "2", "--drop-base")


def test_pull_decodes_with_the_workers_it_is_given(tmp_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec, "SEGMENT", 1000)  # several segments: work for two forked children
    lake = os.path.join(tmp_path, "lake")
    states = [make_state(seed=5, scale=4)]
    states.append(adam_step(states[0], 0))
    publish(open_store(lake), "m", states[0])
    dest = os.path.join(tmp_path, "dest")
    run("pull", "--lake", lake, "--model", "m", "--dest", dest)
    publish(open_store(lake), "m", states[1], base=states[0])
    seen = []
    real = weights_cli.pull

    def spy(*args: object) -> object:
        seen.append(args[4])
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(weights_cli, "pull", spy)
    out = run("pull", "--lake", lake, "--model", "m", "--dest", dest, "--workers", "2", "--processes")
    assert "version 1" in out and "chain [1]" in out
    assert_same_state(load_state(dest), states[1])
    assert [(o.workers, o.processes) for o in seen] == [(2, True)]  # type: ignore[attr-defined]
    result = CliRunner().invoke(
        main, ["weights", "pull", "--lake", lake, "--model", "m", "--dest", dest, "--workers", "0"]
    )
    assert result.exit_code == 2 and "--workers" in result.output


def test_pull_of_unknown_model_is_a_clean_error(tmp_path: str) -> None:
    lake = os.path.join(tmp_path, "lake")
    open_store(lake).put("weights/other/LATEST", b"{}")
    result = CliRunner().invoke(main, ["weights", "pull", "--lake", lake, "--model", "nope", "--dest", f"{tmp_path}/d"])
    assert result.exit_code == 1 and "no published weights" in result.output


@pytest.mark.slow
def test_bench_quick_json() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    result = CliRunner().invoke(bench_weights, ["--quick", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["model"].startswith("FALLBACK")
    for step in report["steps"]:
        assert step["bit_exact"]
        sizes = step["bytes"]
        assert sizes["lakeflow"] < sizes["gap + int16 diff + zstd"] < sizes["paper u32 idx + u16 val"]
    assert report["synthetic"]["bit_exact"]
