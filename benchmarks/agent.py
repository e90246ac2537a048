"""`python -m benchmarks agent`: episodes/s of one rollout service whose tool sleeps, many episodes in flight
versus one at a time, side by side in one run; with `--gateway`, also the same workload played by an
OpenAI-client agent program through the service's gateway.

The tiny model is taught (a few hundred SFT steps on CPU, seconds) to answer every assistant turn
with the Hermes call `<tool_call>{"name": "wait"}</tool_call>`, so real engine turns make real tool
calls; the environment's `wait` tool sleeps `tool_s` and the episode ends after `calls` calls. Each
setting runs the real `RolloutService` (workflow `agent`) on a local lake until it has committed
`episodes` one-episode groups; only `environment.max_concurrent_episodes` differs. The gateway
setting swaps the `environment` section for an `agent` section running `waiting_agent` (the same
tool, rules and reward, written against the `openai` client) with as many episodes in flight as the
widest environment setting; everything else in the config is the same. The gateway settings differ in
where the program runs (threads of the service, or a worker process: `agent.processes`) and whether
its episodes share one HTTP client (`GATEWAY_SETTINGS`); each also reports the gateway's own cost per
request. Every setting reports the CPU time of the benchmark's process per episode (the service, the
transformers engine, the programs on threads; not vLLM's engine process or the worker processes).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from itertools import groupby
from pathlib import Path
from typing import Any

import click

from lakeflow.bench import machine
from lakeflow.io import open_store
from lakeflow.lake import tasks as lake_tasks
from lakeflow.lake.tasks import Task
from lakeflow.raas.agent.env import ChatMessage, Feedback, Tool, Turn
from lakeflow.raas.outcome import Reward

CALL = '<tool_call>{"name": "wait"}</tool_call>'
PROMPT = "Wait twice."
WAIT: dict[str, Any] = {  # the one tool's schema, for the environment and the agent program alike
    "name": "wait",
    "description": "Waits a while.",
    "parameters": {"type": "object", "properties": {}},
}
TOOLS: list[Any] = [{"type": "function", "function": WAIT}]  # WAIT as the OpenAI client sends it


class Waiting:
    """The bench's environment: one tool, `wait`, that sleeps; the episode ends after `calls` calls."""

    def __init__(self, tool_s: float = 0.2, calls: int = 2) -> None:
        self.tool_s, self.calls, self.made = tool_s, calls, 0

    def reset(self, task: Task) -> list[ChatMessage]:
        return [{"role": "user", "content": task.prompt}]

    def tools(self) -> list[Tool]:
        return [Tool(WAIT["name"], WAIT["description"], WAIT["parameters"], self._wait)]

    def _wait(self) -> str:
        time.sleep(self.tool_s)
        return "waited"

    def step(self, turn: Turn) -> Feedback:
        self.made += sum(r.error is None for r in turn.results)
        return Feedback(done=self.made >= self.calls or not turn.results)

    def final_reward(self) -> Reward:
        return Reward(float(self.made >= self.calls), "waited" if self.made >= self.calls else "stopped")


_SHARED_HTTP: list[Any] = []  # waiting_agent's one httpx.Client when `shared_http` (made on first use)


def waiting_agent(
    task: dict[str, Any],
    client: dict[str, str],
    tool_s: float = 0.2,
    calls: int = 2,
    shared_http: bool = False,
    log: str = "",
) -> float:
    """`Waiting` as an agent program for the gateway, with the real `openai` client (no retries, so a
    gateway error fails the episode rather than hiding as a slow one): every tool call sleeps `tool_s`
    and is answered "waited"; the episode stops after `calls` calls or at a turn without one. Reward 1
    for `calls` calls, else 0. Each episode builds its own `OpenAI` client, as the examples do (about 20 ms
    of CPU: httpx builds an SSL context even for http://); `shared_http` passes every episode's client one
    `httpx.Client` instead, so the program's own start costs next to nothing. With `log`, each request's
    start and end (`time.monotonic()`, the same clock in every process) and the program's own CPU time
    (its thread's: the `openai` call's, and on the first request also building the client) are appended to
    that file."""
    import httpx
    from openai import OpenAI

    cpu = time.thread_time()
    if shared_http and not _SHARED_HTTP:
        _SHARED_HTTP.append(httpx.Client())
    http = _SHARED_HTTP[0] if shared_http else None
    openai = OpenAI(base_url=client["base_url"], api_key=client["api_key"], max_retries=0, http_client=http)
    messages: list[Any] = list(task["messages"])
    made, spans = 0, []
    while made < calls:
        started = time.monotonic()
        reply = openai.chat.completions.create(model=client["model"], messages=messages, tools=TOOLS)
        spent, cpu = time.thread_time() - cpu, time.thread_time()
        spans.append(f"{started} {time.monotonic()} {spent}\n")
        message = reply.choices[0].message
        if not message.tool_calls:
            break
        messages.append(message.model_dump(include={"role", "content", "tool_calls"}))
        for call in message.tool_calls:
            time.sleep(tool_s)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "waited"})
            made += 1
    if log:
        with open(log, "a") as f:
            f.write("".join(spans))
    return float(made >= calls)


def teach_tool_calls(model_dir: str, out_dir: str, turns: int = 3, steps: int = 150, seed: int = 0) -> str:
    """A copy of the model at `model_dir` fine-tuned to answer every assistant turn with CALL (loss on
    the assistant's tokens only), saved to `out_dir`. The prompt renders the `wait` tool, as both the
    environment and the gateway do; at lr 1e-2 the current tiny recipe did not learn the call (loss
    stuck near 0.9, no calls sampled), at 3e-3 it does (loss < 0.01 in 150 steps)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    messages: list[dict[str, str]] = [{"role": "user", "content": PROMPT}]
    rendered: Any = tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=False, tools=[WAIT])
    ids = [int(t) for t in rendered]
    labels = [-100] * len(ids)
    for _ in range(turns):  # call, tool answer, call, ...: the assistant's part is learned at every depth
        answer = [*tok.encode(CALL, add_special_tokens=False), tok.eos_token_id]
        ids, labels = ids + answer, labels + answer
        glue = tok.encode("\n<|im_start|>tool\nwaited<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
        ids, labels = ids + glue, labels + [-100] * len(glue)
    x, y = torch.tensor([ids]), torch.tensor([labels])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=x, labels=y).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    model.save_pretrained(out_dir, safe_serialization=True)
    tok.save_pretrained(out_dir)
    return out_dir


def issue(store: Any, episodes: int, tag: str, prompt: str = PROMPT, answers: Sequence[str] = ()) -> None:
    """`episodes` one-episode agent tasks for model 'policy' (the i-th answer `answers[i]`, else empty)."""
    now = datetime.now(UTC)
    for i in range(episodes):
        task = Task(
            task_id=f"{tag}{i:05d}",
            model_id="policy",
            prompt_id=f"p{i}",
            prompt=prompt,
            answer=answers[i] if answers else "",
            n_samples=1,
            task_type="agent",
            issued_at=now,
        )
        lake_tasks.write_task(store, task)


def run(
    episodes: int = 32,
    concurrency: Sequence[int] = (1, 32),
    tool_s: float = 0.2,
    calls: int = 2,
    engine_type: str = "hf",
    gateway: bool = False,
    gather_s: Sequence[float | None] = (None,),
) -> dict[str, Any]:
    """Episodes/s of one rollout service at each concurrency (the same engine, loaded once); with
    `gateway`, also of `waiting_agent` through the gateway at the widest concurrency, every gateway setting
    once per `gather_s` (the gateway's window; None: its default), in one process."""
    work = Path(tempfile.mkdtemp(prefix="lakeflow-bench-agent-"))
    try:
        return _run(work, episodes, concurrency, tool_s, calls, engine_type, gateway, gather_s)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(
    work: Path,
    episodes: int,
    concurrency: Sequence[int],
    tool_s: float,
    calls: int,
    engine_type: str,
    gateway: bool,
    gather_s: Sequence[float | None],
) -> dict[str, Any]:
    from lakeflow.models import resolve_model
    from lakeflow.raas.config import RaasConfig
    from lakeflow.raas.engines import build_engine
    from lakeflow.raas.service import RolloutService

    base = resolve_model("tiny:bench-agent", work / "models")
    taught = teach_tool_calls(base, str(work / "taught"))
    engine_config: dict[str, Any] = {"type": engine_type}
    if engine_type == "vllm":
        engine_config |= {"max_model_len": 512, "enforce_eager": True}
    settings: list[tuple[str, int, float | None]] = [("environment", width, None) for width in concurrency]
    if gateway:
        settings += [(setting, max(concurrency), g) for g in gather_s for setting in GATEWAY_SETTINGS]
    results: list[dict[str, Any]] = []
    engines: list[Any] = []
    busy: list[tuple[float, float]] = []  # (start, end) of every engine call

    def play(setting: str, width: int, gather: float | None, n: int, tag: str) -> tuple[int, float, float, Any]:
        store = open_store(str(work / f"lake-{tag}"))
        issue(store, n, f"{tag}-")
        section = _section(setting, width, tool_s, calls, str(work / f"requests-{tag}"), gather)
        config = RaasConfig.model_validate({**common, **section})
        if not engines:
            engines.append(_timed(build_engine(config.engine, seed=0), busy))
        service = RolloutService(store, "policy", config, engine=engines[0])
        started, cpu = time.perf_counter(), time.process_time()
        stats = service.run(max_groups=n)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        service.close()
        return stats.groups, seconds, cpu, store

    common: dict[str, Any] = {
        "engine": engine_config,
        "model": taught,
        "workflow": "agent",
        "max_new_tokens": 48,
        "temperature": 0.25,  # the taught call nearly always (the tiny model learns it only roughly)
        "poll_s": 0.05,
        "seed": 0,
        "commit_window_s": 0,
        "cache_dir": str(work / "cache"),
    }
    for setting, width, gather in settings:
        tag = f"{setting}-{width}" + ("" if gather is None else f"-g{gather}")
        # untimed first: each setting's one-time costs (the engine's first calls, the openai client's first
        # request, which builds its response models) are paid before its timed episodes, as in a long run
        play(setting, width, gather, min(width, 4), f"warm-{tag}")
        groups, seconds, cpu, store = play(setting, width, gather, episodes, tag)
        tool_calls, turns = _structure(store, engines[0].decode)
        results.append(
            {
                "setting": setting,
                "gather_s": gather,
                "concurrent_episodes": width,
                "episodes": groups,
                "seconds": round(seconds, 3),
                "episodes_per_s": round(groups / seconds, 3),
                "cpu_ms_per_episode": round(cpu * 1000 / max(groups, 1), 1),
                "tool_calls_per_episode": round(tool_calls / max(groups, 1), 3),
                "turns_per_episode": round(turns / max(groups, 1), 3),
                **_gateway_cost(work / f"requests-{tag}", busy),
            }
        )
    engine = engines[0] if engines else None
    close = getattr(engine, "close", None)
    if close is not None:
        close()
    env = [r for r in results if r["setting"] == "environment"]
    one = next((r for r in env if r["concurrent_episodes"] == min(concurrency)), env[0])
    for r in results:
        r["ratio_to_one_at_a_time"] = round(r["episodes_per_s"] / one["episodes_per_s"], 2)
    out: dict[str, Any] = {"engine": engine_type, "tool_s": tool_s, "calls_per_episode": calls, "results": results}
    for via in results:  # each gateway setting against the environment at the same concurrency
        if via["setting"] != "environment":
            via["vs_environment"] = round(via["episodes_per_s"] / env[-1]["episodes_per_s"], 2)
    return out


GATEWAY_SETTINGS = {  # setting: (agent.processes, every episode's client on one shared httpx.Client)
    "gateway": (0, False),
    "gateway-shared": (0, True),
    "gateway-workers": (1, False),
    "gateway-shared-workers": (1, True),
}


def _section(setting: str, width: int, tool_s: float, calls: int, log: str, gather_s: float | None) -> dict[str, Any]:
    """The config section that differs between settings: the environment, or the agent program (`gather_s`
    None: the gateway's default; a round goes as soon as every running episode has asked)."""
    if setting == "environment":
        environment = {"name": f"{__name__}:Waiting", "args": {"tool_s": tool_s, "calls": calls}}
        return {"environment": {**environment, "max_concurrent_episodes": width, "max_turns": calls + 1}}
    processes, shared = GATEWAY_SETTINGS[setting]
    args = {"tool_s": tool_s, "calls": calls, "shared_http": shared, "log": log}
    program = {"program": f"{__name__}:waiting_agent", "args": args, "processes": processes}
    gateway = {} if gather_s is None else {"gateway": {"gather_s": gather_s}}
    return {"agent": {**program, **gateway, "max_concurrent_episodes": width, "max_seconds": 600}}


def _timed(engine: Any, busy: list[tuple[float, float]]) -> Any:
    """The engine, its `generate` calls' (start, end) appended to `busy`."""
    generate = engine.generate

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        try:
            return generate(*args, **kwargs)
        finally:
            busy.append((started, time.monotonic()))

    engine.generate = timed
    return engine


def _gateway_cost(log: Path, busy: list[tuple[float, float]]) -> dict[str, Any]:
    """The gateway's own cost per request of a gateway setting: the time its client waited for the answer
    less the engine's time in those same seconds (HTTP, parsing, rendering, tokenizing, the gather window
    and waiting for the service's loop), p50 and p99 in milliseconds; and the program's own CPU time per
    request, its client's start included (ms, mean)."""
    if not log.exists():
        return {}
    costs, program = [], 0.0
    for line in log.read_text().splitlines():
        start, end, cpu = map(float, line.split())
        engine = sum(max(0.0, min(end, b_end) - max(start, b_start)) for b_start, b_end in busy)
        costs.append((end - start - engine) * 1000)
        program += cpu * 1000
    costs.sort()

    def at(q: float) -> float:
        return round(costs[min(len(costs) - 1, int(q * len(costs)))], 1)

    cost = {"requests": len(costs), "gateway_ms_p50": at(0.5), "gateway_ms_p99": at(0.99)}
    return cost | {"program_cpu_ms_per_request": round(program / max(len(costs), 1), 1)}


def _structure(store: Any, decode: Callable[[list[int]], str]) -> tuple[int, int]:
    """Tool calls and turns of every committed episode, read back from the lake's samples. An environment
    sample counts them in its `extra`; a gateway episode's samples (one per segment) count turns per
    segment, and its tool calls are read from the stored tokens: each run of sampled tokens (loss mask
    1) is one assistant turn, and its calls are those the gateway returned (the hermes parser's, none
    for a turn with a malformed call)."""
    from lakeflow.lake import LakeReader
    from lakeflow.raas.agent.parsers import hermes

    reader = LakeReader(store)
    calls = turns = 0
    for _, record in reader.poll().commits:
        table = reader.read_shard(record, ["extra", "response_ids", "loss_mask"]).to_pylist()
        for row in table:
            info = json.loads(row["extra"])
            if "tool_calls" in info:  # the environment's episode
                calls += sum(info["tool_calls"].values()) - info["tool_errors"]
                turns += info["turns"]
                continue
            turns += info.get("turns", 0)  # a program that never asked the model: one sample with no turns
            ids = row["response_ids"]
            for sampled, run in groupby(range(len(ids)), key=lambda i: row["loss_mask"][i]):
                if sampled:
                    parsed = hermes(decode([ids[i] for i in run]))
                    calls += 0 if parsed.errors else len(parsed.calls)
    return calls, turns


def render(result: dict[str, Any]) -> str:
    from lakeflow.text import text_table

    keys = (
        "concurrent_episodes",
        "episodes",
        "seconds",
        "episodes_per_s",
        "ratio_to_one_at_a_time",
        "cpu_ms_per_episode",
        "tool_calls_per_episode",
        "turns_per_episode",
    )
    rows = [[_label(r), *(str(r[k]) for k in keys)] for r in result["results"]]
    head = [
        "played by",
        "concurrent",
        "episodes",
        "s",
        "episodes/s",
        "x one-at-a-time",
        "CPU ms/ep",
        "tool calls/ep",
        "turns/ep",
    ]
    title = f"engine {result['engine']}, tool sleeps {result['tool_s']} s, {result['calls_per_episode']} calls/episode"
    lines = [title, *text_table(head, rows, rule=True)]
    for r in result["results"]:
        if "vs_environment" in r:
            lines.append(f"{_label(r)} / environment at the same concurrency: {r['vs_environment']}x")
        if "requests" in r:
            cost = f"p50 {r['gateway_ms_p50']} ms, p99 {r['gateway_ms_p99']} ms over {r['requests']} requests"
            cost += f"; the program's own CPU {r['program_cpu_ms_per_request']} ms per request"
            lines.append(f"{_label(r)}: the gateway's own cost per request (wait less engine time) {cost}")
    return "\n".join(lines)


def _label(row: dict[str, Any]) -> str:
    """A row's setting, with its gather window where the run set one."""
    setting = str(row.get("setting", "environment"))
    return setting if row.get("gather_s") is None else f"{setting} gather_s={row['gather_s']:g}"


@click.command("agent")
@click.option("--episodes", type=click.IntRange(min=1), default=64, show_default=True, help="Episodes per setting.")
@click.option("--concurrent", type=click.IntRange(min=2), default=32, show_default=True, help="Episodes in flight.")
@click.option("--tool-s", type=click.FloatRange(min=0), default=0.2, show_default=True, help="Seconds per tool call.")
@click.option("--calls", type=click.IntRange(min=1), default=2, show_default=True, help="Tool calls per episode.")
@click.option("--engine", type=click.Choice(["hf", "vllm"]), default="hf", show_default=True)
@click.option(
    "--gateway", is_flag=True, help="Also play the episodes with an OpenAI-client program through the gateway."
)
@click.option(
    "--gather-s",
    type=click.FloatRange(min=0),
    multiple=True,
    help="The gateway's gather_s (default: its config's); given more than once, every gateway setting runs at each.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_agent(
    episodes: int,
    concurrent: int,
    tool_s: float,
    calls: int,
    engine: str,
    gateway: bool,
    gather_s: tuple[float, ...],
    as_json: bool,
) -> None:
    """Episodes/s of workflow `agent` on the tiny model taught to call a sleeping tool: `--concurrent`
    episodes in flight beside one at a time, the same service code and engine, in one run; `--gateway`
    adds the same episodes at `--concurrent` played by an OpenAI-client program through the gateway."""
    result = run(episodes, (1, concurrent), tool_s, calls, engine, gateway, gather_s or (None,))
    result["machine"] = machine()
    click.echo(json.dumps(result, indent=1) if as_json else render(result))
