"""`python -m lakeflow.raas.agent.envs NAME --n N --seed S --out FILE [--set key=value ...]`: write an
environment's tasks as JSONL rows {prompt_id, prompt, answer, task_type} for a `{type: file}` dataset;
with `--demos`, its demonstrations (conversations {messages, tools}) for a trainer's `warmup.data`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lakeflow.raas.agent.envs import DATASETS, DEMOS


def _value(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lakeflow.raas.agent.envs", description=__doc__)
    parser.add_argument("name", choices=sorted(DATASETS), help="the environment whose tasks to write")
    parser.add_argument("--n", type=int, default=100, help="number of tasks")
    parser.add_argument("--seed", type=int, default=0, help="seed: the same seed writes the same file")
    parser.add_argument("--out", required=True, help="the JSONL file to write ('-': stdout)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a generator option")
    parser.add_argument("--demos", action="store_true", help=f"write demonstrations ({', '.join(sorted(DEMOS))})")
    args = parser.parse_args(argv)
    if args.demos and args.name not in DEMOS:
        parser.error(f"{args.name} ships no demonstrations; these do: {', '.join(sorted(DEMOS))}")
    options = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--set takes KEY=VALUE, got {item!r}")
        options[key] = _value(value)
    try:
        rows = (DEMOS if args.demos else DATASETS)[args.name](args.n, args.seed, **options)
    except (TypeError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    # Demonstrations keep their keys' order: a template renders a tool's schema as given, and the warm-up must
    # show the model the tools as the pool does (env.tools()); sorted keys taught another prompt than RL's.
    text = "".join(json.dumps(row, sort_keys=not args.demos) + "\n" for row in rows)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
