"""One episode of mini-swe-agent (pinned by scripts/install-harnesses in its own virtual environment),
unchanged, as a lakeflow command agent: `agent: {command: [python, examples/agents/mini_swe_agent.py]}`.

Started by any Python, it re-runs itself with the harness's own interpreter (build/harnesses/mini-swe-agent),
then plays the task with mini-swe-agent's `DefaultAgent`, its `LitellmModel` on the episode's
OPENAI_BASE_URL and a `LocalEnvironment` in a scratch folder (removed after the episode), or with --in-cwd
in the working directory (a sandbox's /workspace, whose changes lakeflow stores), configured by the
package's own mini.yaml or --config FILE (a config in mini-swe-agent's format, e.g. mini-swe-agent-short.yaml
beside this file); --trajectory has mini-swe-agent save its trajectory there after every step. Its submission
(what it printed after COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT) is the answer; an agent that stopped without one
(step limit, repeated format errors) fails the episode.

With --demos ROWS --out FILE it writes, instead of playing, a warm-up demonstration per task row (a rows file
of `lakeflow tasks files`): the conversation the harness would have with a model that solves the task with
the row's `solution` command and then submits, rendered with the config's own templates and bash tool.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from harness import answer, fail, installed, scratch, task_prompt


def _in_harness_venv() -> None:
    """Re-run this file with the mini-swe-agent environment's Python unless it is that one already."""
    python = installed("mini-swe-agent", "bin", "python")
    if Path(sys.prefix).resolve() != python.parent.parent.resolve():
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        os.execve(python, [str(python), __file__, *sys.argv[1:]], env)  # its packages only, not the caller's


def _on_alarm(signum: int, frame: Any) -> None:
    fail("mini-swe-agent ran past its --seconds")


def harness_config(path: str | None) -> dict[str, Any]:
    """mini-swe-agent's config: its own mini.yaml, or the file at `path` (relative: to the working directory,
    else to this file's folder)."""
    import yaml
    from minisweagent.config import builtin_config_dir

    if path is None:
        return dict(yaml.safe_load((builtin_config_dir / "mini.yaml").read_text()))
    file = Path(path)
    if not file.is_absolute() and not file.exists():
        file = Path(__file__).resolve().parent / path
    if not file.is_file():
        fail(f"--config {path}: no such file")
    return dict(yaml.safe_load(file.read_text()))


def play(prompt: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.litellm_model import LitellmModel

    config = harness_config(args.config)
    endpoint = {"api_base": os.environ["OPENAI_BASE_URL"], "api_key": os.environ["OPENAI_API_KEY"]}
    model = LitellmModel(
        **{**config["model"], "model_kwargs": {**config["model"].get("model_kwargs", {}), **endpoint}},
        model_name=f"openai/{os.environ.get('OPENAI_MODEL', 'policy')}",
        cost_tracking="ignore_errors",  # a model litellm has no price for
    )
    env = LocalEnvironment(cwd=str(work), env=config["environment"]["env"], timeout=args.command_seconds)
    agent_config = {**config["agent"], "step_limit": args.step_limit, "wall_time_limit_seconds": int(args.seconds)}
    if args.trajectory:
        agent_config["output_path"] = work / args.trajectory
    result: dict[str, Any] = DefaultAgent(model, env, **agent_config).run(prompt)  # exit_status, submission
    return result


def demos(config: dict[str, Any], rows: Path, out: Path, limit: int | None) -> int:
    """Write a demonstration per row (the first `limit`): solve with its `solution`, then submit; how many."""
    from jinja2 import StrictUndefined, Template
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.utils.actions_toolcall import BASH_TOOL

    env_vars = LocalEnvironment(env=config["environment"]["env"]).get_template_vars()

    def render(template: str, **values: Any) -> str:
        return Template(template, undefined=StrictUndefined).render(**{**config["agent"], **env_vars, **values})

    def call(i: int, command: str) -> dict[str, Any]:
        function = {"name": "bash", "arguments": {"command": command}}
        return {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": f"call-{i}", "type": "function", "function": function}],
        }

    done = {"returncode": 0, "output": "", "exception_info": ""}
    observation = render(config["model"]["observation_template"], output=done)
    lines = []
    for line in rows.read_text().splitlines()[:limit]:
        row = json.loads(line)
        messages = [
            {"role": "system", "content": render(config["agent"]["system_template"])},
            {"role": "user", "content": render(config["agent"]["instance_template"], task=row["prompt"])},
            call(0, row["solution"]),
            {"role": "tool", "tool_call_id": "call-0", "content": observation},
            call(1, "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
        ]
        lines.append(json.dumps({"tools": [BASH_TOOL], "messages": messages}))
    out.write_text("".join(line + "\n" for line in lines))
    return len(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=50, help="time limit (below the agent's max_seconds)")
    parser.add_argument("--step-limit", type=int, default=4, help="mini-swe-agent's step_limit (model calls)")
    parser.add_argument("--command-seconds", type=int, default=10, help="time limit of one shell command")
    parser.add_argument("--in-cwd", action="store_true", help="act in the working directory, not a scratch folder")
    parser.add_argument("--trajectory", help="save mini-swe-agent's trajectory there (relative to where it acts)")
    parser.add_argument("--config", help="a mini-swe-agent config file instead of its mini.yaml")
    parser.add_argument("--demos", type=Path, help="write demonstrations for this rows file (with --out)")
    parser.add_argument("--out", type=Path, help="where --demos writes (JSONL)")
    parser.add_argument("--limit", type=int, help="--demos: only the first N rows")
    args = parser.parse_args()
    _in_harness_venv()
    if args.demos is not None:
        if args.out is None:
            fail("--demos needs --out FILE")
        os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
        print(
            f"wrote {demos(harness_config(args.config), args.demos, args.out, args.limit)} demonstrations to {args.out}"
        )
        return
    prompt = task_prompt()
    with scratch("mini-swe-agent") as home:
        work = Path.cwd() if args.in_cwd else home / "work"
        work.mkdir(exist_ok=True)
        os.environ.update(
            MSWEA_GLOBAL_CONFIG_DIR=str(home / "config"),  # not the user's ~/.config
            MSWEA_SILENT_STARTUP="1",
            LITELLM_LOCAL_MODEL_COST_MAP="True",  # litellm would otherwise fetch its price list at import
        )
        signal.signal(signal.SIGALRM, _on_alarm)
        signal.alarm(max(1, int(args.seconds)))
        result = play(prompt, work, args)
        signal.alarm(0)
    if result.get("exit_status") != "Submitted":
        fail(f"mini-swe-agent stopped without a submission: {result.get('exit_status')}")
    answer(str(result.get("submission", "")))


if __name__ == "__main__":
    main()
