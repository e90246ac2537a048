"""The evaluation service: follow a model's published versions, generate on held-out prompts with the
rollout engines, score with the rollout rewards, and write one `eval` row per version and dataset.

It only reads weights and writes `metrics/eval/`: it never blocks the trainer, and a slow evaluation
only falls behind (with `every: K` it evaluates every K-th version in order; without, the newest).
Versions already in the eval table for this model and dataset are skipped, so a restart resumes.
"""

from __future__ import annotations

import logging
import math
import shutil
import tempfile
import threading
import time
from datetime import UTC, datetime
from typing import Any

from lakeflow.dataflow.datasets import load_prompts
from lakeflow.errors import WeightsIntegrityError
from lakeflow.evaluation.config import EvalConfig
from lakeflow.evaluation.episodes import DROPPED, episode_columns, episodes_runner, play
from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.lake.metrics import read_metrics
from lakeflow.lake.tasks import Task
from lakeflow.raas.config import HFEngineConfig
from lakeflow.raas.engines import Completion, Engine, build_engine, load_version, set_chat_template
from lakeflow.raas.episodes.ends import FAILURES
from lakeflow.raas.rewards import build_reward
from lakeflow.raas.trajectory import task_messages
from lakeflow.tracking import MetricSink
from lakeflow.weights import TransferOptions, latest_version

log = logging.getLogger("lakeflow.eval")
FAILED = {*FAILURES, DROPPED}  # ends of episodes that never pass, whatever reward they were given


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one prompt with `c` passing out of `n` samples: 1 - C(n - c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


class EvalService:
    """One model's held-out evaluation. `run(until_version)` loops; `evaluate(version)` does one."""

    def __init__(self, store: Store, model_id: str, config: EvalConfig, engine: Engine | None = None) -> None:
        self.store = store
        self.model_id = layout.check_name(model_id, "model id")
        self.config = config
        self.engine = engine if engine is not None else build_engine(config.engine or HFEngineConfig(), config.seed)
        set_chat_template(self.engine, config.chat_template)
        self.prompts = load_prompts(config.dataset).to_pylist()[: config.limit]
        for task_type in sorted({str(p["task_type"]) for p in self.prompts}):  # PluginError now, not a silent 0
            if config.environment is None:  # (an environment scores its own episodes)
                build_reward(task_type, config.reward_max_chars, config.reward)
        self.dataset = config.name or (self.prompts[0]["dataset"] if self.prompts else "heldout")
        self._own_cache = config.cache_dir is None
        self.cache_dir = config.cache_dir or tempfile.mkdtemp(prefix="lakeflow-eval-")
        self.sink = MetricSink(
            store,
            "eval",
            f"eval-{self.model_id}",
            config.tracker,
            run=f"eval/{self.model_id}",
            params={"model_id": self.model_id, **config.model_dump(mode="json", exclude={"tracker"})},
            flush_s=0.0,  # one object per evaluated version
        )
        self.done = self._evaluated()
        self._stop = threading.Event()

    def stop(self) -> None:
        """Ask the loop to exit after the evaluation in progress (safe from a signal handler)."""
        self._stop.set()

    def _evaluated(self) -> set[int]:
        table, _ = read_metrics(self.store, "eval")
        rows = table.select(["model_id", "dataset", "policy_version"]).to_pylist()
        return {r["policy_version"] for r in rows if r["model_id"] == self.model_id and r["dataset"] == self.dataset}

    def due(self, latest: int, until_version: int | None = None) -> int | None:
        """The next version to evaluate given the newest published one, or None."""
        every = self.config.every
        if every is None:
            return latest if latest not in self.done else None
        wanted = [v for v in range(0, latest + 1, every) if v not in self.done]
        if until_version is not None and latest >= until_version and until_version not in self.done:
            wanted.append(until_version)  # the last version of a run is always evaluated
        return min(wanted) if wanted else None

    def run(self, until_version: int | None = None) -> None:
        """Evaluate versions as they are published until `until_version` is evaluated (None: until stopped)."""
        try:
            while not self._stop.is_set():
                if until_version is not None and until_version in self.done:
                    return
                latest = latest_version(self.store, self.model_id)
                version = None if latest is None else self.due(latest, until_version)
                if version is None:
                    self._stop.wait(self.config.poll_s)
                    continue
                self.evaluate(version)
        finally:
            self.sink.flush()

    def evaluate(self, version: int) -> dict[str, Any] | None:
        """Pull `version`, generate on every held-out prompt, score, write the eval row and return it;
        None when the version cannot be pulled (collected or broken: it is skipped)."""
        started = time.monotonic()
        try:
            # a full version as a model; a LoRA adapter version on its base, as the rollout service serves it
            load_version(
                self.engine, self.store, self.model_id, version, self.cache_dir, TransferOptions(progress=False)
            )
        except (WeightsIntegrityError, FileNotFoundError) as e:
            log.warning("cannot pull %s version %d, skipping it: %s", self.model_id, version, e)
            self.done.add(version)
            return None
        row = self._score(version, started)
        self.sink.add(row)
        self.done.add(version)
        log.info(
            "%s version %d: pass@1 %.3f, mean reward %.3f", self.model_id, version, row["pass_at_1"], row["reward_mean"]
        )
        return row

    def _tasks(self) -> list[Task]:
        return [
            Task(
                task_id=f"eval-{i}",
                model_id=self.model_id,
                prompt_id=str(p["prompt_id"]),
                prompt=str(p["prompt"]),
                answer=str(p["answer"]),
                n_samples=self.config.n_samples,
                task_type=str(p["task_type"]),
                dataset=self.dataset,
                issued_at=datetime.now(UTC),
            )
            for i, p in enumerate(self.prompts)
        ]

    def _generate(self, tasks: list[Task]) -> list[list[Completion] | None]:
        """The completions of every task, in as few engine calls as the prompts' lengths allow (one, when
        every prompt leaves room for max_new_tokens); None for a prompt that leaves no room at all."""
        c, engine = self.config, self.engine
        prompts = [engine.encode_chat(task_messages(t)) for t in tasks]
        by_room: dict[int, list[int]] = {}  # max_tokens -> indices of the prompts generated with it
        for i, ids in enumerate(prompts):
            room = min(c.max_new_tokens, engine.max_model_len - len(ids))
            if room >= 1:
                by_room.setdefault(room, []).append(i)
        out: list[list[Completion] | None] = [None] * len(tasks)
        for max_tokens, indices in sorted(by_room.items(), reverse=True):
            results = engine.generate([prompts[i] for i in indices], c.n_samples, max_tokens, c.temperature)
            for i, completions in zip(indices, results, strict=True):
                out[i] = completions
        return out

    def _score(self, version: int, started: float) -> dict[str, Any]:
        c = self.config
        n = c.n_samples
        tasks = self._tasks()
        if c.environment is not None or c.agent is not None:
            return self._row(version, started, *self._score_episodes(tasks))
        passes, rewards, lengths, cut = [], [], [], 0
        for task, completions in zip(tasks, self._generate(tasks), strict=True):
            reward = build_reward(task.task_type, c.reward_max_chars, c.reward)
            scores = [0.0] * n if completions is None else [reward(x.text, task.answer).value for x in completions]
            passes.append(sum(r >= c.threshold for r in scores))
            rewards += [float(r) for r in scores]
            lengths += [0] * n if completions is None else [len(x.token_ids) for x in completions]
            cut += 0 if completions is None else sum(x.finish_reason == "length" for x in completions)
        count = max(len(rewards), 1)
        return self._row(
            version, started, passes, rewards, {"response_len_mean": sum(lengths) / count, "finish_length": cut / count}
        )

    def _score_episodes(self, tasks: list[Task]) -> tuple[list[int], list[float], dict[str, Any]]:
        """Each task played as n_samples whole episodes; an episode that failed (its end) never passes."""
        runner = episodes_runner(self.config, self.engine, self.model_id, self.store)
        by_task = play(runner, tasks)
        played = [by_task.get(t.task_id, []) for t in tasks]
        passes = [sum(e.reward >= self.config.threshold and e.end not in FAILED for e in eps) for eps in played]
        episodes = [e for eps in played for e in eps]
        return passes, [e.reward for e in episodes], episode_columns(episodes)

    def _row(
        self, version: int, started: float, passes: list[int], rewards: list[float], columns: dict[str, Any]
    ) -> dict[str, Any]:
        c = self.config
        n = c.n_samples
        prompts = max(len(passes), 1)
        return {
            "model_id": self.model_id,
            "policy_version": version,
            "dataset": self.dataset,
            "prompts": len(passes),
            "n_samples": n,
            "temperature": c.temperature,
            "threshold": c.threshold,
            "pass_at_1": sum(pass_at_k(n, k, 1) for k in passes) / prompts,
            "k": n,
            "pass_at_k": sum(pass_at_k(n, k, n) for k in passes) / prompts,
            "reward_mean": sum(rewards) / max(len(rewards), 1),
            **columns,
            "gen_s": time.monotonic() - started,
        }

    def close(self) -> None:
        self.sink.close()
        if self._own_cache:
            shutil.rmtree(self.cache_dir, ignore_errors=True)
