"""One episode of Claude Code (the `claude` CLI, pinned by scripts/install-harnesses), unchanged, as a
lakeflow command agent: `agent: {command: [python, examples/agents/claude_code.py, --seconds, "50"]}`.

Claude Code reads ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY, which lakeflow sets to the episode's gateway
URL and token. It runs in print mode in a scratch folder (its HOME and working directory, removed after the
episode) with only its Bash tool and a short system prompt; the `result` of its JSON output is the answer.
"""

from __future__ import annotations

import argparse
import json
import os

from harness import answer, child_env, fail, installed, run, scratch, task_prompt

SYSTEM = "You are a careful assistant with a shell. Solve the task; end with the final answer alone."
MODEL = "claude-sonnet-4-5-20250929"  # one Claude Code knows (it refuses others before sending); any is served


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=50, help="time limit (below the agent's max_seconds)")
    parser.add_argument("--max-turns", type=int, default=4, help="Claude Code's --max-turns")
    args = parser.parse_args()
    claude = installed("claude-code", "node_modules", ".bin", "claude")
    prompt = task_prompt()
    with scratch("claude-code") as home:
        work = home / "work"
        work.mkdir()
        extra = {"DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
        if os.geteuid() == 0:
            extra["IS_SANDBOX"] = "1"  # it refuses --dangerously-skip-permissions as root otherwise
        command = [str(claude), "-p", "--output-format", "json", "--max-turns", str(args.max_turns)]
        command += ["--dangerously-skip-permissions", "--model", MODEL, "--system-prompt", SYSTEM, "--tools", "Bash"]
        # -p reads the prompt from stdin; on an error it exits 1 with the reason in its JSON result
        out = run(command, child_env(home, **extra), work, args.seconds, stdin=prompt, check=False)
    try:
        result = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        fail(f"claude printed no JSON result: {out[-500:]!r}")
    if not isinstance(result.get("result"), str) or result.get("is_error"):
        why = result.get("result") or result.get("errors") or json.dumps(result)[-500:]
        fail(f"claude gave no final answer ({result.get('subtype')}, {result.get('num_turns')} turns): {why}")
    answer(result["result"])


if __name__ == "__main__":
    main()
