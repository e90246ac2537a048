"""Whether this machine computes bf16 natively, and the precision a `fastest` setting picks from that.

A CPU without bf16 instructions runs a bf16 model several times slower than float32 (measured on an
AVX2-only EPYC: a SmolLM2-sized linear 7.6 ms in bf16 against 1.5 ms in float32, and vLLM falls back to
torch's linear). x86 CPUs have them with AVX512-BF16 or AMX, Arm CPUs with the BF16 extension; CUDA GPUs
from compute capability 8.0 (Ampere) on. `fastest` (an engine's `dtype`, the trainer's `autocast`) means
bf16 where the device has them and float32 where it does not. The CPU's flags are read from
/proc/cpuinfo (Linux); where they cannot be read, bf16 counts as not native.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
# x86 `flags` and Arm `Features` words that mean bf16 arithmetic in hardware.
_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def cpu_bf16_flags(cpuinfo: str | None = None) -> list[str]:
    """The bf16 instruction-set flags this CPU reports (empty: none, or /proc/cpuinfo cannot be read)."""
    if cpuinfo is None:
        try:
            cpuinfo = CPUINFO.read_text(errors="replace")
        except OSError:
            return []
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return sorted(_BF16_FLAGS.intersection(value.split()))
    return []


@cache
def native_bf16(device: str = "cpu", cpuinfo: str | None = None) -> bool:
    """Whether torch device `device` ('cpu', 'cuda', 'cuda:1') computes bf16 in hardware. torch is imported
    only for a device other than the CPU."""
    if device.split(":")[0] == "cpu":
        return bool(cpu_bf16_flags(cpuinfo))
    import torch

    kind = torch.device(device).type
    if kind == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False))
    return False  # mps, xpu, …: not known here; float32 is the safe choice


def fastest_dtype(device: str) -> str:
    """The dtype `fastest` computes in on `device`: bfloat16 where it is native, else float32."""
    return "bfloat16" if native_bf16(device) else "float32"


def fastest_autocast(device: str) -> str | None:
    """The trainer's autocast that `fastest` picks on `device`: bfloat16 where it is native, else none."""
    return "bfloat16" if fastest_dtype(device) == "bfloat16" else None


def slow_bf16_note(dtype: str | None, device: str = "cpu") -> str | None:
    """A warning for computing in `dtype` bfloat16 on a CPU without native bf16 (None: no reason to warn)."""
    if dtype != "bfloat16" or device.split(":")[0] != "cpu" or native_bf16(device):
        return None
    return (
        "bfloat16 on this CPU, which has no bf16 instructions (no avx512_bf16, amx_bf16 or bf16 in /proc/cpuinfo), "
        "runs several times slower than float32: `fastest` picks for the host"
    )


def gpu_driver_present() -> bool:
    """Whether a GPU driver's device files exist here (NVIDIA's or AMD's), without importing torch."""
    return any(Path(p).exists() for p in ("/dev/nvidiactl", "/dev/kfd"))
