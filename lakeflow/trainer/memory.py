"""Peak memory of one training step: the process's resident set (Linux: its high-water mark, reset per
step through /proc/self/clear_refs; elsewhere the peak since start) and the accelerator's allocations."""

from __future__ import annotations

import contextlib
import resource
import sys

import torch


class StepMemory:
    """`reset()` at the start of a step, `peaks()` at its end."""

    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda") and torch.cuda.is_available()
        self.device = device
        self._resettable = sys.platform.startswith("linux")

    def reset(self) -> None:
        if self._resettable:
            try:
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")  # resets VmHWM, the peak resident set size
            except OSError:
                self._resettable = False
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)

    def peaks(self) -> dict[str, float]:
        """`rss_peak_mb` (and `gpu_peak_mb` on CUDA: the largest allocation total of the step)."""
        out = {"rss_peak_mb": self._rss_peak_mb()}
        if self.cuda:
            out["gpu_peak_mb"] = torch.cuda.max_memory_allocated(self.device) / 2**20
        return out

    def _rss_peak_mb(self) -> float:
        if self._resettable:
            with contextlib.suppress(OSError), open("/proc/self/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) / 1024  # kB
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # bytes on macOS, kB elsewhere
        return peak / 2**20 if sys.platform == "darwin" else peak / 1024
