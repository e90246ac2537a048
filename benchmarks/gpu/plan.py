"""What the GPU check runs and how its pieces are kept within the time budget: the sizes (`Plan`,
`TINY` for the CPU dry run), the deadline (`Clock`) and `attempt`, which turns a piece's outcome into
a status: "ok", "skipped: <reason>" (no GPU, a package missing, no time left) or "failed".
Standard library only, so the check starts (and says what is missing) on any machine."""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from benchmarks.errors import SkippedError

Log = Callable[[str], None]
Save = Callable[[dict[str, Any]], None]  # a section so far, for the report on disk
DType = Literal["float32", "bfloat16", "float16"]  # as TrainerConfig.dtype


@dataclass(frozen=True)
class BatchSpec:
    """One training batch: `samples` synthetic trajectories in groups of `group_size`."""

    samples: int
    group_size: int = 8
    prompt_tokens: int = 256  # median prompt length
    response_tokens: int = 512  # median response length
    max_response_tokens: int = 1024


@dataclass(frozen=True)
class Plan:
    """The sizes of one check: full (one H100/H200-class GPU, 16 cores) or tiny (the CPU dry run)."""

    models: tuple[str, ...] = ("qwen2-0.5b", "qwen2-1.5b")  # gpu_model.SHAPES; the engine uses the first
    steps: int = 3  # trainer steps per run; step 0 is warm-up and left out of the medians
    batch: BatchSpec = field(default_factory=lambda: BatchSpec(64))
    max_tokens_per_microbatch: int = 8192
    dtype: DType = "bfloat16"  # of the trainer's parameters
    run_cap_s: tuple[float, ...] = (60.0, 100.0)  # per trainer run, per model
    engine: tuple[int, int, int] = (4, 16, 128)  # prompts, samples per prompt, new tokens
    engine_need_s: float = 45.0
    codec_params: int = 1_500_000_000  # a slice of the 8B shapes (16 GB for all of them)
    codec_div: int = 1  # the 8B shapes, every dimension divided by this
    codec_workers: tuple[int, ...] = field(default_factory=lambda: tuple(sorted({1, 4, 16, os.cpu_count() or 1})))
    codec_cap_s: float = 200.0
    trainer_rows: tuple[int, ...] | None = None  # which of gpu_trainer.CONFIGURATIONS run (None: every one)


TINY = Plan(
    models=("tiny",),
    batch=BatchSpec(16, group_size=4, prompt_tokens=32, response_tokens=32, max_response_tokens=64),
    max_tokens_per_microbatch=1024,
    dtype="float32",  # bf16 matmuls are slow on CPUs; the code path is the same
    run_cap_s=(60.0,),
    engine=(2, 4, 16),
    engine_need_s=10.0,
    codec_params=2_000_000,
    codec_div=32,
    codec_workers=(1, 4),
    codec_cap_s=60.0,
    trainer_rows=(0, 3),  # a writer process on the default schedule, and in line every step: the two ends
)


class Clock:
    """The check's deadline."""

    def __init__(self, budget_s: float) -> None:
        self.started = time.monotonic()
        self.deadline = self.started + budget_s

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def need(self, seconds: float, what: str) -> None:
        """SkippedError unless `seconds` are left for `what`."""
        if self.left() < seconds:
            raise SkippedError(f"time budget: {max(self.left(), 0):.0f} s left, {what} needs ~{seconds:.0f} s")


def attempt(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`fn`'s result with status "ok"; a skip or a missing package as "skipped" with the reason; any other
    error as "failed" with its traceback (recorded, counted against `passed`, and the check goes on)."""
    try:
        return {"status": "ok", **fn()}
    except SkippedError as e:
        return {"status": "skipped", "reason": str(e)}
    except ImportError as e:
        return {"status": "skipped", "reason": missing(e)}
    except Exception as e:  # one failed measurement must not stop the others: recorded with its traceback
        error = f"{type(e).__name__}: {e}"
        return {"status": "failed", "passed": False, "error": error, "traceback": traceback.format_exc(limit=12)}


def missing(e: ImportError) -> str:
    """Why a piece was skipped for a missing package, and what to do."""
    todo = "on a GPU machine run scripts/gpu-wheels and install .whl/ (docs/gpu.md)"
    return f"missing package {e.name or '?'} ({e}); {todo}"


def require_torch(device: str) -> None:
    """ImportError without torch or transformers; SkippedError when `device` is CUDA and none is visible."""
    import torch
    import transformers  # noqa: F401

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SkippedError(
            f"no CUDA device (torch {torch.__version__}: torch.cuda.is_available() is False); "
            "the CPU dry run is --device cpu --tiny"
        )
