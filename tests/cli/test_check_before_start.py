"""A run, trainer or rollout service that could not start here is refused before anything starts: a model that
is neither a directory nor cached nor on a hub that answers, a device this machine lacks, a config that
contradicts its model (vocabulary, positions, no chat template). One `Error: <key>: ...` line per problem,
exit code 1, no traceback, nothing written. The hub cases run the real CLI in a subprocess (the hub's
settings are read from the environment when huggingface_hub is imported)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli.test_config_check import refused, refused_run

HUB_ID = "lakeflow-test/no-such-model"


def model_dir(tmp_path: Path, chat_template: bool = True, **config: Any) -> Path:
    """A model directory as `lakeflow models convert` writes it, with placeholder weights (the check only
    looks for the files)."""
    path = tmp_path / "model"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"vocab_size": 320, "max_position_embeddings": 1024, **config}))
    tokenizer = {"eos_token": "<|im_end|>", **({"chat_template": "{{ messages }}"} if chat_template else {})}
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer))
    (path / "model.safetensors").write_bytes(b"")
    return path


def run_config(tmp_path: Path, model: str, trainer: dict[str, Any] | None = None, **sections: Any) -> Path:
    config = {
        "name": "here",
        "steps": 1,
        "models": [
            {
                "id": "policy",
                "dataflow": {"dataset": {"type": "synthetic"}, **sections.get("dataflow", {})},
                "trainer": {"model": model, **(trainer or {})},
                "raas": {"config": sections.get("raas", {})},
            }
        ],
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def subprocess_refused(tmp_path: Path, args: list[str], **env: str) -> list[str]:
    """`python -m lakeflow ARGS` with the hub settings of `env` and an empty Hugging Face cache."""
    environ = {**os.environ, "HF_HOME": str(tmp_path / "hf"), **env}
    environ.pop("HF_HUB_CACHE", None)
    done = subprocess.run(
        [sys.executable, "-m", "lakeflow", *args], capture_output=True, text=True, env=environ, timeout=120
    )
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr
    return done.stderr.strip().splitlines()


def test_a_model_path_that_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / "models" / "nothing"
    lines = refused_run(tmp_path, run_config(tmp_path, str(missing), dataflow={"vocab_size": 320}))
    assert lines == [
        f"Error: models[0].trainer.model: no model directory at {missing}: convert a model there "
        f"(`lakeflow models convert SOURCE --out {missing}`)"
    ]


def test_a_directory_without_weights(tmp_path: Path) -> None:
    path = model_dir(tmp_path)
    (path / "model.safetensors").unlink()
    (line,) = refused_run(tmp_path, run_config(tmp_path, str(path)))
    assert line.startswith(f"Error: models[0].trainer.model: {path} holds no weights")


def test_a_hub_id_with_the_hub_offline(tmp_path: Path) -> None:
    config = run_config(tmp_path, HUB_ID, dataflow={"vocab_size": 320})
    lines = subprocess_refused(tmp_path, ["run", str(config), "--run-dir", str(tmp_path / "run")], HF_HUB_OFFLINE="1")
    (line,) = lines
    assert line.startswith(f"Error: models[0].trainer.model: '{HUB_ID}' is not a directory here and not in the ")
    assert "the hub is offline (HF_HUB_OFFLINE is set)" in line and f"`hf download {HUB_ID}`" in line
    assert "lakeflow models convert" in line
    assert not (tmp_path / "run").exists()


def test_a_hub_id_with_the_hub_unreachable(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on: the connection is refused at once
        s.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{s.getsockname()[1]}"
    config = run_config(tmp_path, HUB_ID)  # no vocab_size either: it cannot be read from the model
    lines = subprocess_refused(
        tmp_path, ["run", str(config), "--run-dir", str(tmp_path / "run")], HF_ENDPOINT=endpoint, HF_HUB_OFFLINE="0"
    )
    assert [line.split(":")[1].strip() for line in lines] == [
        "models[0].dataflow.vocab_size",
        "models[0].trainer.model",
    ]
    assert f"the hub ({endpoint}) cannot be reached" in lines[1]


def test_a_hub_id_in_the_cache_is_found_offline(tmp_path: Path) -> None:
    snapshot = tmp_path / "hf" / "hub" / f"models--{HUB_ID.replace('/', '--')}" / "snapshots" / ("0" * 40)
    snapshot.parent.mkdir(parents=True)
    model_dir(tmp_path).rename(snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
    config = run_config(tmp_path, HUB_ID, dataflow={"vocab_size": 321})  # checked against the cached config.json
    lines = subprocess_refused(tmp_path, ["run", str(config), "--run-dir", str(tmp_path / "run")], HF_HUB_OFFLINE="1")
    assert lines == [
        f"Error: models[0].dataflow.vocab_size: 321 contradicts '{HUB_ID}', whose vocabulary is 320: remove the key "
        "(it is read from the model) or fix it"
    ]


def test_device_cuda_on_a_machine_without_one(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    config = run_config(
        tmp_path, "tiny:x", trainer={"device": "cuda"}, raas={"engine": {"type": "hf", "device": "cuda:1"}}
    )
    lines = refused_run(tmp_path, config)
    assert [line.split(": ", 2)[1] for line in lines] == [
        "models[0].trainer.device",
        "models[0].raas.config.engine.device",
    ]
    assert lines[0].startswith("Error: models[0].trainer.device: 'cuda', but this machine has no CUDA device")


def test_a_vocabulary_that_contradicts_the_model(tmp_path: Path) -> None:
    path = model_dir(tmp_path)
    assert refused_run(tmp_path, run_config(tmp_path, str(path), dataflow={"vocab_size": 512})) == [
        f"Error: models[0].dataflow.vocab_size: 512 contradicts '{path}', whose vocabulary is 320: remove the key "
        "(it is read from the model) or fix it"
    ]


def test_a_max_model_len_above_the_models(tmp_path: Path) -> None:
    path = model_dir(tmp_path)
    raas = {"engine": {"type": "vllm", "max_model_len": 4096}}
    assert refused_run(tmp_path, run_config(tmp_path, str(path), raas=raas)) == [
        f"Error: models[0].raas.config.engine.max_model_len: 4096 exceeds the 1024 positions of '{path}' "
        "(config.json max_position_embeddings): lower it, or leave it out to use the model's"
    ]


def test_a_model_without_a_chat_template(tmp_path: Path) -> None:
    path = model_dir(tmp_path, chat_template=False)
    (line,) = refused_run(tmp_path, run_config(tmp_path, str(path)))
    assert line.startswith(f"Error: models[0].trainer.model: '{path}' has no chat template")
    (path / "chat_template.jinja").write_text("{{ messages }}")  # what `lakeflow models convert` writes
    from lakeflow.run import load_run_config
    from lakeflow.run.check import check_run_config, check_run_here

    config = load_run_config(run_config(tmp_path, str(path)))
    assert check_run_config(config) + check_run_here(config) == []


def test_launch_refuses_contradictions_but_not_what_its_nodes_have(tmp_path: Path) -> None:
    path = model_dir(tmp_path)
    raas = {"engine": {"type": "vllm", "max_model_len": 4096}}
    config = run_config(tmp_path, str(path), trainer={"device": "cuda"}, raas=raas)
    out = tmp_path / "out"
    lines = refused("launch", str(config), "--target", "k8s", "--lake", "s3://b/x", "--out", str(out))
    assert lines == [
        f"Error: models[0].raas.config.engine.max_model_len: 4096 exceeds the 1024 positions of '{path}' "
        "(config.json max_position_embeddings): lower it, or leave it out to use the model's"
    ]  # device cuda: the cluster's nodes have it (the launch's own checks give them GPUs)
    assert not out.exists()


def test_train_and_raas_check_their_model_and_device(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    missing = str(tmp_path / "nothing")
    config = tmp_path / "trainer.yaml"
    config.write_text(yaml.safe_dump({"model": missing}))
    assert refused("train", "--lake", str(lake), "--model", "policy", "--config", str(config)) == [
        f"Error: model: no model directory at {missing}: convert a model there "
        f"(`lakeflow models convert SOURCE --out {missing}`)"
    ]
    path = model_dir(tmp_path, chat_template=False)
    config = tmp_path / "raas.yaml"
    config.write_text(yaml.safe_dump({"model": str(path), "engine": {"type": "vllm", "max_model_len": 2048}}))
    lines = refused("raas", "--lake", str(lake), "--model", "policy", "--config", str(config))
    assert [line.split(": ", 2)[1] for line in lines] == ["engine.max_model_len", "model"]
    assert not lake.exists()


def test_train_refuses_a_device_it_lacks(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    config = tmp_path / "trainer.yaml"
    config.write_text(yaml.safe_dump({"model": "tiny:x", "device": "cuda"}))
    (line,) = refused("train", "--lake", str(tmp_path / "lake"), "--model", "policy", "--config", str(config))
    assert line.startswith("Error: device: 'cuda', but this machine has no CUDA device")
