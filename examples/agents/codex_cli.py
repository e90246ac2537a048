"""One episode of Codex CLI (`codex exec`, pinned by scripts/install-harnesses), unchanged, as a lakeflow
command agent: `agent: {command: [python, examples/agents/codex_cli.py, --seconds, "50"]}`.

A provider named `lakeflow` in the episode's own CODEX_HOME/config.toml points at OPENAI_BASE_URL (the
Responses API, the key from OPENAI_API_KEY); the model is the pool's name (OPENAI_MODEL), not one of
Codex's own, for which it sends its tools in a form the gateway refuses. Its hosted web search and its
multi-agent tool namespace are turned off (the gateway serves function tools only). It runs in a scratch
folder, removed after the episode; its last message (`--output-last-message`) is the answer.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from harness import answer, child_env, fail, installed, run, scratch, task_prompt


def provider_config(base_url: str, model: str) -> str:
    """config.toml: the gateway as Codex's model provider."""
    return (
        f"model = {json.dumps(model)}\n"
        'model_provider = "lakeflow"\n\n'
        "[model_providers.lakeflow]\n"
        'name = "lakeflow"\n'
        f"base_url = {json.dumps(base_url)}\n"
        'wire_api = "responses"\n'
        'env_key = "OPENAI_API_KEY"\n'
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=50, help="time limit (below the agent's max_seconds)")
    args = parser.parse_args()
    codex = installed("codex", "node_modules", ".bin", "codex")
    prompt = task_prompt()
    with scratch("codex") as home:
        work, codex_home, last = home / "work", home / "codex-home", home / "last-message.txt"
        work.mkdir()
        codex_home.mkdir()
        model = os.environ.get("OPENAI_MODEL", "policy")
        (codex_home / "config.toml").write_text(provider_config(os.environ["OPENAI_BASE_URL"], model))
        command = [str(codex), "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]
        command += ["--ephemeral", "-c", 'web_search="disabled"', "-c", "features.multi_agent=false"]
        command += ["--color", "never", "-C", str(work), "--output-last-message", str(last), "-"]  # prompt: stdin
        run(command, child_env(home, CODEX_HOME=str(codex_home)), work, args.seconds, stdin=prompt)
        text = _read(last)
    if not text.strip():
        fail("codex exec wrote no last message (no final answer)")
    answer(text)


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


if __name__ == "__main__":
    main()
