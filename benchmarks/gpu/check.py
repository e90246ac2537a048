"""`scripts/gpu-check` (`python -m benchmarks gpu`): the GPU path measured in one command, within a time budget.

Sections, in this order: the weight codec on the host's cores (first, so its process pool forks
before CUDA starts), every loss on the device, the real-model recipe (`lakeflow run` with vLLM and the
trainer on the same GPU), the transformers engine, then the trainer on CUDA at two Qwen2 sizes with its
writes in a writer process, a thread and in line (last: its runs take what is left of the budget, each
within a cap). A
section that cannot run here (no GPU, a package missing, no time left) is recorded as
"skipped: <reason>"; one that fails is recorded with its error and the others still run.
`report.json` and `report.txt` go to the output folder after every section.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.gpu.losses import losses_section
from benchmarks.gpu.plan import TINY, Clock, Log, Plan, Save, attempt
from benchmarks.gpu.realmodel import realmodel_section
from benchmarks.gpu.report import render
from benchmarks.gpu.sections import codec_section, engine_section, trainer_section

SECTIONS = ("codec", "losses", "realmodel", "engine", "trainer")


@dataclass(frozen=True)
class Options:
    """What the command line sets."""

    out: Path
    device: str = "cuda"
    tiny: bool = False
    sections: tuple[str, ...] = SECTIONS
    budget_s: float = 540.0
    work_dir: Path | None = None  # models and lakes (GBs): a temp dir under it, removed at the end
    real_model: str | None = None  # the realmodel section's model (None: models/smollm2-135m-instruct, else the hub id)


def run_check(options: Options, log: Log = print) -> dict[str, Any]:
    """Run the sections, write report.json and report.txt to `options.out`; returns the report."""
    plan = TINY if options.tiny else Plan()
    clock = Clock(options.budget_s)
    options.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="lakeflow-gpu-check-", dir=options.work_dir))
    report: dict[str, Any] = {
        "machine": {},  # filled in last: importing torch before the codec's process pool forks is avoidable
        "options": {**asdict(options), "out": str(options.out), "work_dir": str(work)},
        "plan": asdict(plan),
        "sections": {},
    }
    models: dict[str, str] = {}  # shape name -> model directory, shared by the trainer and the engine

    def save(name: str) -> Save:
        def partial(section: dict[str, Any]) -> None:
            report["sections"][name] = section
            write(report, clock, options.out)

        return partial

    runners = {
        "codec": lambda: codec_section(plan, clock, log),
        "trainer": lambda: trainer_section(plan, options.device, work, models, clock, log, save("trainer")),
        "engine": lambda: engine_section(plan, options.device, work, models, clock, log),
        "losses": lambda: losses_section(options.device, options.tiny, clock, log),
        "realmodel": lambda: realmodel_section(options.real_model, options.device, options.tiny, work, clock, log),
    }
    try:
        for name in SECTIONS:
            if name not in options.sections:
                report["sections"][name] = {"status": "skipped", "reason": "not selected (--sections)"}
                continue
            log(f"[{clock.elapsed():6.1f}s] {name} ...")
            try:
                report["sections"][name] = attempt(runners[name])
            except KeyboardInterrupt:  # Ctrl-C, or SIGTERM from `timeout` (the command line turns it into this)
                so_far = report["sections"].get(name, {})
                error = "interrupted (SIGTERM or Ctrl-C); what finished before is kept"
                report["sections"][name] = {
                    **so_far,
                    "status": "failed",
                    "passed": False,
                    "error": error,
                    "traceback": "",
                }
                write(report, clock, options.out)
                raise
            log(f"[{clock.elapsed():6.1f}s] {name}: {summary(report['sections'][name])}")
            write(report, clock, options.out)  # after every section: a check killed later keeps what it measured
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["machine"] = machine(options.device, options.work_dir)
    write(report, clock, options.out)
    return report


def write(report: dict[str, Any], clock: Clock, out: Path) -> None:
    """report.json and report.txt, as far as the check has come."""
    report["elapsed_s"] = clock.elapsed()
    report["passed"] = all(s.get("passed", True) for s in report["sections"].values())
    report["ran"] = [n for n, s in report["sections"].items() if s["status"] != "skipped"]
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (out / "report.txt").write_text(render(report) + "\n")


def summary(section: dict[str, Any]) -> str:
    if section["status"] == "skipped":
        return f"skipped: {section['reason']}"
    if section["status"] == "failed":
        return f"FAILED: {section['error']}"
    return "passed" if section.get("passed", True) else "ran, checks NOT passed"


def machine(device: str, work_dir: Path | None) -> dict[str, Any]:
    """Where the check ran: host, memory, free disk for models and lakes, Python, packages, accelerator."""
    about: dict[str, Any] = {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "ram_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "work_dir_free_gib": round(shutil.disk_usage(work_dir or tempfile.gettempdir()).free / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": device,
    }
    modules: dict[str, Any] = {}
    for name in ("numpy", "pyarrow", "torch", "transformers"):
        try:
            modules[name] = importlib.import_module(name)
        except ImportError:
            about[name] = None
        else:
            about[name] = getattr(modules[name], "__version__", "?")
    torch = modules.get("torch")
    if torch is not None and device.startswith("cuda") and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.device(device))
        about["gpu"] = props.name
        about["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        about["cuda"] = torch.version.cuda
    return about
