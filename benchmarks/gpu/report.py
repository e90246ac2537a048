"""The GPU check's report as text (report.txt): one block per section, "skipped: <reason>" or the
error where a section or one of its measurements did not run."""

from __future__ import annotations

from typing import Any

from benchmarks.gpu.losses import render_losses
from benchmarks.gpu.realmodel import render_realmodel
from lakeflow.text import text_table


def render(report: dict[str, Any]) -> str:
    m = report.get("machine") or {}
    where = m.get("gpu") or f"device {report['options']['device']}"
    versions = ", ".join(f"{k} {m[k]}" for k in ("python", "torch", "transformers", "numpy") if m.get(k))
    verdict = "PASSED" if report["passed"] else "NOT PASSED"
    verdict = verdict if report["ran"] else "nothing ran"
    host = f"{m.get('cpus', '?')} cpus, {m.get('ram_gib', '?')} GiB RAM"
    host += f", {m.get('work_dir_free_gib', '?')} GiB free for models and lakes"
    lines = [f"lakeflow GPU check: {where}; {host}; {versions}"]
    lines.append(f"{report['elapsed_s']:.0f} s; {verdict} (the sections that ran: {', '.join(report['ran']) or '-'})")
    sections = (("codec", _codec), ("losses", render_losses), ("realmodel", render_realmodel), ("engine", _engine))
    for name, render_section in (*sections, ("trainer", _trainer)):
        section = report["sections"].get(name)
        if section is None:
            continue
        lines += ["", f"== {name}"]
        lines += _status(section)
        if section["status"] in ("ok", "running") or "models" in section:  # what ran, also of an interrupted section
            lines += render_section(section)
    return "\n".join(lines)


def _status(entry: dict[str, Any]) -> list[str]:
    """The line of a piece that did not run (empty when it ran)."""
    if entry["status"] == "skipped":
        return [f"skipped: {entry['reason']}"]
    if entry["status"] == "failed":
        return [f"FAILED: {entry['error']}", *("  " + line for line in entry["traceback"].splitlines()[-6:])]
    return []


def _short(entry: dict[str, Any]) -> str:
    """A table cell for a piece that did not run; the reason goes under the table (`_notes`)."""
    return "skipped" if entry["status"] == "skipped" else "FAILED"


def _notes(pieces: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [f"{label}: {_status(entry)[0]}" for label, entry in pieces if entry["status"] != "ok"]


def _codec(s: dict[str, Any]) -> list[str]:
    lines = [
        f"lakeflow/weights/codec.py on {s['tensors']} tensors of Qwen3-8B's shapes: {s['bytes'] / 1e6:,.0f} MB bf16 "
        f"({s['share_of_model']:.0%} of {s['model_params'] / 1e9:.2f}B params; generated in {s['generate_s']:.1f} s)",
        "GB/s of bf16 state; floor: copying the state into touched memory with as many threads; "
        "codec: one call with the codec's own workers (in place: into a copy of the old state, as pull does); "
        "split: one call per part of row blocks",
    ]
    rows = []
    for r in s["runs"]:
        if r["status"] != "ok":
            rows.append([str(r["workers"]), r["kind"], _short(r), "", "", "", "", "", "", ""])
            continue
        rows.append(
            [
                str(r["workers"]),
                r["kind"],
                f"{r['encode_gbps']:.2f}",
                f"{r['apply_gbps']:.2f}",
                f"{r['apply_in_place_gbps']:.2f}" if "apply_in_place_gbps" in r else "-",
                f"{r['copy_floor_gbps']:.1f}",
                f"{r['encode_vs_floor']:.1%}",
                f"{r['apply_vs_floor']:.1%}",
                f"{r['bytes_per_param']:.4f}",
                "yes" if r["bit_exact"] else "NO",
            ]
        )
    header = [
        "workers",
        "kind",
        "encode",
        "apply",
        "in place",
        "floor",
        "enc/floor",
        "apply/floor",
        "B/param",
        "bit-exact",
    ]
    notes = _notes([(f"{r['kind']} x{r['workers']}", r) for r in s["runs"]])
    return lines + text_table(header, rows, rule=True) + notes


def _engine(s: dict[str, Any]) -> list[str]:
    lines = [
        f"transformers engine, {s['model']} in {s['dtype']}: {s['prompts']} prompts x {s['samples_per_prompt']} "
        f"samples x {s['max_tokens']} new tokens = {s['generated_tokens']} tokens in {s['generate_s']:.2f} s "
        f"= {s['tokens_per_s']:,.0f} tokens/s",
        "behaviour logprob vs the trainer's forward (token_logprobs), |difference| in nats:",
    ]
    for dtype, a in s["agreement"].items():
        judged = ""
        if "tolerance" in a:
            judged = f" (tolerance {a['tolerance']:g}: {'within' if a['within_tolerance'] else 'NOT within'})"
        lines.append(
            f"  {dtype}: max {a['max_abs_diff']:.2e}, mean {a['mean_abs_diff']:.2e} over {a['tokens']} tokens{judged}"
        )
    return lines


def _trainer(s: dict[str, Any]) -> list[str]:
    lines = [
        f"lakeflow.trainer.Trainer, GRPO, {s['dtype']}; {s['mode']}",
        f"MFU = 6 x params x tokens / compute time / {s['peak']}; tokens = prompt + response (no padding); "
        "medians over the steps after step 0",
        "I/O blocking = lake I/O on the trainer's critical path (heartbeat io_block_s) over the step cycles; "
        "cycle s = time between heartbeats; compute s = the step function alone; writes s = the writer's job per "
        "version (heartbeat, weight delta, optimizer checkpoint when due); writes: in a spawned writer process, in "
        "a thread of the trainer, or in line; ckpt: an optimizer checkpoint every K versions",
    ]
    header = ["model", "params", "writes", "ckpt", "steps", "tokens/step", "cycle s", "compute s", "cycle/compute"]
    header += ["tokens/s", "MFU", "I/O blocking", "io_block s", "copy s", "publish_block s", "writes s"]
    header += ["GPU MB", "RSS MB", "bit-exact", "start s"]
    rows = []
    for model in s["models"]:
        if model["status"] != "ok":
            rows.append([model["model"], _short(model), *[""] * (len(header) - 2)])
            continue
        for r in model["runs"]:
            if r["status"] != "ok":
                rows.append([model["model"], "", _writes(r), "", _short(r), *[""] * (len(header) - 5)])
                continue
            rows.append(
                [
                    model["model"],
                    f"{r['params'] / 1e6:,.1f}M",
                    _writes(r),
                    str(r["checkpoint_every"]),
                    str(r["steps"]),
                    f"{r['tokens_per_step']:,.0f}",
                    f"{r['cycle_s']:.2f}",
                    f"{r['compute_s']:.2f}",
                    f"{r['cycle_over_compute']:.2f}x",
                    f"{r['tokens_per_s']:,.0f}",
                    f"{r['mfu']:.1%}",
                    f"{r['io_share']:.1%}",
                    f"{r['io_block_s']:.2f}",
                    f"{r['median_snapshot_s']:.2f}",
                    f"{r['median_publish_block_s']:.2f}",
                    f"{r['median_publish_s']:.2f}",
                    f"{r['gpu_peak_mb']:,.0f}",
                    f"{r['rss_peak_mb']:,.0f}",
                    "yes" if r["bit_exact"] else "NO",
                    f"{r['start_s']:.1f}",
                ]
            )
    pieces = [(m["model"], m) for m in s["models"]]
    pieces += [(f"{m['model']} writes {_writes(r)}", r) for m in s["models"] for r in m.get("runs", [])]
    return lines + text_table(header, rows, rule=True) + _notes(pieces)


def _writes(run: dict[str, Any]) -> str:
    return str(run.get("writer") or ("thread" if run["overlap_io"] else "in line"))
