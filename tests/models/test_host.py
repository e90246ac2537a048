"""`fastest` precision: bf16 where the device computes it in hardware, float32 where it does not, read from the
CPU's flags; and the warning `lakeflow run` gives for bf16 on a CPU without them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from lakeflow.cli.run import load_job
from lakeflow.models import host, resolve_model
from lakeflow.raas.config import HFEngineConfig
from lakeflow.raas.engines import vllm as vllm_engine
from lakeflow.raas.engines.hf import HFEngine
from lakeflow.run import check as run_check
from lakeflow.trainer.model import compute_precision

# The flags lines of the AVX2-only EPYC these tests were written on and of a Sapphire Rapids Xeon, and the
# Features line of an Arm Neoverse V1 (cut to what matters and some neighbours).
EPYC = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma bmi2 sha_ni\n"
XEON = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n"


@pytest.mark.parametrize(("cpuinfo", "flags"), [(EPYC, []), (XEON, ["amx_bf16", "avx512_bf16"]), (ARM, ["bf16"])])
def test_bf16_flags_are_read_from_cpuinfo(cpuinfo: str, flags: list[str]) -> None:
    assert host.cpu_bf16_flags(cpuinfo) == flags
    assert host.native_bf16("cpu", cpuinfo) is bool(flags)


def test_no_flags_line_counts_as_not_native() -> None:
    assert host.cpu_bf16_flags("processor\t: 0\n") == []
    assert host.native_bf16("cpu", "") is False


def no_bf16(monkeypatch: pytest.MonkeyPatch, native: bool = False) -> None:
    """Make this machine's CPU one with (native) or without bf16 instructions."""
    monkeypatch.setattr(host, "native_bf16", lambda device="cpu", cpuinfo=None: native)


@pytest.mark.parametrize("native", [False, True])
def test_vllm_dtype_fastest_follows_the_cpu(monkeypatch: pytest.MonkeyPatch, native: bool) -> None:
    no_bf16(monkeypatch, native)
    assert vllm_engine.engine_dtype("fastest", on_cpu=True) == ("bfloat16" if native else "float32")
    assert vllm_engine.engine_dtype("fastest", on_cpu=False) == "auto"  # a GPU: the model's own
    assert vllm_engine.engine_dtype(None, on_cpu=True) == "float32"
    assert vllm_engine.engine_dtype(None, on_cpu=False) == "auto"
    assert vllm_engine.engine_dtype("bfloat16", on_cpu=True) == "bfloat16"  # named: taken as it is


@pytest.mark.parametrize("native", [False, True])
def test_trainer_autocast_fastest_follows_the_cpu(monkeypatch: pytest.MonkeyPatch, native: bool) -> None:
    no_bf16(monkeypatch, native)
    layer = torch.nn.Linear(4, 4)
    with compute_precision("cpu", "fastest"):
        out = layer(torch.ones(1, 4))
    assert out.dtype == (torch.bfloat16 if native else torch.float32)
    with compute_precision("cpu", "bfloat16"):
        assert layer(torch.ones(1, 4)).dtype == torch.bfloat16


def job(tmp_path: Path, trainer: dict[str, object], engine: dict[str, object]) -> str:
    config = {
        "name": "speed",
        "steps": 1,
        "models": [
            {
                "id": "policy",
                "dataflow": {"dataset": {"type": "synthetic"}},
                "trainer": {"model": "tiny:x", **trainer},
                "raas": {"config": {"engine": engine}},
                "eval": {"dataset": {"type": "synthetic"}, "engine": {"type": "hf", "dtype": "bfloat16"}},
            }
        ],
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_run_warns_of_bf16_on_a_cpu_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    no_bf16(monkeypatch)
    monkeypatch.setattr(run_check, "gpu_driver_present", lambda: False)
    load_job(job(tmp_path, {"autocast": "bfloat16"}, {"type": "hf", "dtype": "bfloat16"}), None)
    lines = capsys.readouterr().err.strip().splitlines()
    assert [line.split(": ")[1] for line in lines] == [
        "models[0].trainer.autocast",
        "models[0].raas.config.engine.dtype",
        "models[0].eval.engine.dtype",
    ]
    assert lines[0] == (
        "Warning: models[0].trainer.autocast: bfloat16 on this CPU, which has no bf16 instructions (no avx512_bf16, "
        "amx_bf16 or bf16 in /proc/cpuinfo), runs several times slower than float32: `fastest` picks for the host"
    )


def test_run_says_nothing_for_fastest_or_a_cpu_with_bf16(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    no_bf16(monkeypatch)
    monkeypatch.setattr(run_check, "gpu_driver_present", lambda: False)
    load_job(job(tmp_path, {"autocast": "fastest"}, {"type": "vllm", "dtype": "fastest"}), None)
    assert "Warning: models[0].eval" in capsys.readouterr().err  # the eval's engine still names bfloat16
    no_bf16(monkeypatch, native=True)
    load_job(job(tmp_path, {"autocast": "bfloat16"}, {"type": "vllm", "dtype": "bfloat16"}), None)
    assert capsys.readouterr().err == ""


def test_vllm_on_a_gpu_machine_is_not_warned_of(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    no_bf16(monkeypatch)
    monkeypatch.setattr(run_check, "gpu_driver_present", lambda: True)
    load_job(job(tmp_path, {}, {"type": "vllm", "dtype": "bfloat16"}), None)
    slow = [line for line in capsys.readouterr().err.splitlines() if host.slow_bf16_note("bfloat16") in line]
    assert slow == [f"Warning: models[0].eval.engine.dtype: {host.slow_bf16_note('bfloat16')}"]  # the pool's: none


@pytest.mark.parametrize("native", [False, True])
def test_the_transformers_engine_loads_in_the_fastest_dtype(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, native: bool
) -> None:
    no_bf16(monkeypatch, native)
    engine = HFEngine(HFEngineConfig(dtype="fastest"), seed=0)
    engine.load(resolve_model("tiny:host", tmp_path))
    assert engine.model.dtype == (torch.bfloat16 if native else torch.float32)
