"""Teachers: frozen served models that give the logprob of every sampled token (on-policy distillation,
docs/distillation.md). Composed around any group runner, they score what it finishes before it is written.

`TeacherRunner` wraps the pool's runner: each group it finishes is scored by the teacher of its task's
dataset (`teacher_for`), all of an `advance`'s rows for one teacher in one `POST /v1/score` (the served
model scores them in one engine call), at the pool's sampling temperature, the one the behaviour logprobs
are of. Each trajectory gets `teacher_logprobs` (one per response token) and `teacher` ('<id>@<version>'),
which become the sample's columns. No group is admitted until every teacher has answered once (a served
teacher may start after the pool, `lakeflow launch`), with a log line per try. A request that still fails
after its retries drops the group (never written; its task is issued again), as a judge does; a teacher
whose vocabulary is not the student's stops the service (ConfigError): its logprobs would be of other tokens.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from lakeflow.errors import ConfigError, LakeflowError
from lakeflow.lake.tasks import Task
from lakeflow.raas.config import TeacherConfig, teacher_for
from lakeflow.raas.engines import tokenizer_fingerprint
from lakeflow.raas.groups import Group, GroupRunner
from lakeflow.raas.trajectory import Trajectory

log = logging.getLogger(__name__)


class TeacherUnavailable(LakeflowError):
    """A scoring request failed after its retries (unreachable, timed out, HTTP 5xx, a reply without logprobs)."""


class Teacher:
    """One served teacher: `score` asks it for the logprobs of given token ids, with retries."""

    def __init__(self, config: TeacherConfig, tokenizer: str | None = None) -> None:
        if config.endpoint is None:
            raise ConfigError(
                f"teacher {config.pool!r} has no endpoint: `lakeflow run` sets it for a `serve:` pool of the run; "
                "for a rollout service started on its own, give teachers[].endpoint (http://host:port/v1)"
            )
        self.config, self.tokenizer = config, tokenizer  # the student's tokenizer fingerprint (None: not checked)
        self.url = config.endpoint.rstrip("/") + "/score"

    def score(
        self, rows: Sequence[tuple[Sequence[int], Sequence[int]]], temperature: float
    ) -> tuple[list[list[float]], str]:
        """Per row (prompt ids, response ids), the teacher's logprob of each response token, and the teacher's
        lineage '<id>@<version>'. TeacherUnavailable when it fails after the retries; ConfigError when its
        vocabulary is not the student's or it refuses the request for good (HTTP 4xx)."""
        c = self.config
        body = {
            "model": c.pool,
            "temperature": temperature,
            "rows": [{"prompt_ids": list(p), "response_ids": list(r)} for p, r in rows],
        }
        retrying = Retrying(
            stop=stop_after_attempt(c.retries + 1),
            wait=wait_exponential(multiplier=c.backoff_s, max=30.0),
            retry=retry_if_exception_type(TeacherUnavailable),
            reraise=True,
        )
        answer: dict[str, Any] = retrying(self._post, json.dumps(body).encode())
        if self.tokenizer is not None and answer.get("tokenizer") not in (None, self.tokenizer):
            raise ConfigError(
                f"teacher {c.pool!r} has another vocabulary than the student (tokenizer {answer.get('tokenizer')} "
                f"!= {self.tokenizer}): its logprobs would be of other tokens. Distil from a teacher of the "
                "student's tokenizer (the same model family)"
            )
        logprobs = answer.get("logprobs")
        if not isinstance(logprobs, list) or [len(x) for x in logprobs] != [len(r) for _, r in rows]:
            raise TeacherUnavailable(f"teacher {c.pool!r} answered without one logprob per response token")
        return logprobs, f"{answer.get('model', c.pool)}@{answer.get('version', 'unknown')}"

    def answers(self) -> str | None:
        """None once the server answers (`GET /v1/models`: it listens when its model is loaded), else why not."""
        url = self.config.endpoint.rstrip("/") + "/models" if self.config.endpoint else ""
        try:
            with urllib.request.urlopen(url, timeout=min(self.config.timeout_s, 10.0)) as response:
                response.read()
        except urllib.error.HTTPError as e:
            with e:  # its response stays open until closed
                return None if e.code < 500 else f"HTTP {e.code}"  # it answers, /models or not
        except (OSError, ValueError) as e:
            return str(e)
        return None

    def _post(self, data: bytes) -> dict[str, Any]:
        request = urllib.request.Request(self.url, data, {"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.config.timeout_s) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as e:
            with e:  # its response stays open until closed
                message = e.read()[:300].decode("utf-8", "replace")
            if e.code >= 500 or e.code in (408, 429):
                raise TeacherUnavailable(f"teacher {self.config.pool!r}: HTTP {e.code}: {message}") from e
            raise ConfigError(
                f"teacher {self.config.pool!r} at {self.url} refused a scoring request (HTTP {e.code}: {message}): "
                "check that it serves that id and that the prompts and responses fit its context"
            ) from e
        except (OSError, ValueError) as e:  # unreachable, timed out, a reply that is not JSON
            raise TeacherUnavailable(f"teacher {self.config.pool!r} at {self.url}: {e}") from e
        if not isinstance(answer, dict):
            raise TeacherUnavailable(f"teacher {self.config.pool!r}: the reply is not a JSON object")
        return answer


class TeacherRunner:
    """A group runner whose finished groups are scored by their teacher before the service writes them."""

    def __init__(
        self, inner: GroupRunner, teachers: dict[str, Teacher], configs: list[TeacherConfig], temperature: float
    ):
        self.inner, self.teachers, self.configs = inner, teachers, configs
        self.temperature = temperature if temperature > 0 else 1.0  # greedy rollouts: the teacher's own policy
        self._datasets: dict[str, str] = {}  # group key -> its task's dataset
        self._unheard = sorted(teachers)  # teachers that have not answered yet (they may start after the pool)
        self._next_ask, self._wait_s = 0.0, 1.0

    def can_admit(self, n_samples: int) -> bool:
        return self._heard() and self.inner.can_admit(n_samples)

    def _heard(self) -> bool:
        """Whether every teacher has answered once; until then no group is generated (its scoring would fail
        and drop it), and the silent ones are asked again after a backoff (1 s doubling to 30 s)."""
        if not self._unheard or time.monotonic() < self._next_ask:
            return not self._unheard
        for pool in list(self._unheard):
            why = self.teachers[pool].answers()
            if why is None:
                log.info("teacher %s answers at %s", pool, self.teachers[pool].config.endpoint)
                self._unheard.remove(pool)
            else:
                log.warning(
                    "teacher %s at %s does not answer yet (%s); it may still be loading: no group is generated "
                    "until it does, asking again in %.3g s",
                    pool,
                    self.teachers[pool].config.endpoint,
                    why,
                    self._wait_s,
                )
        self._next_ask, self._wait_s = time.monotonic() + self._wait_s, min(30.0, 2 * self._wait_s)
        return not self._unheard

    def add(self, key: str, task: Task) -> None:
        self._datasets[key] = task.dataset
        self.inner.add(key, task)

    def advance(self, wait_s: float) -> list[Group]:
        groups = self.inner.advance(wait_s)
        by_teacher: dict[str, list[Group]] = {}
        for g in groups:
            config = teacher_for(self.configs, self._datasets.pop(g.key, ""))
            if config is not None and not g.dropped:
                by_teacher.setdefault(config.pool, []).append(g)
        dropped: dict[str, str] = {}
        for pool, scored in by_teacher.items():
            try:
                self._score(self.teachers[pool], [t for g in scored for t in g.trajectories])
            except TeacherUnavailable as e:
                log.warning("teacher %s failed; %d group(s) dropped: %s", pool, len(scored), e)
                dropped.update({g.key: f"teacher: {e}" for g in scored})
        return [Group(g.key, [], g.seconds, dropped[g.key], g.failures) if g.key in dropped else g for g in groups]

    def _score(self, teacher: Teacher, trajectories: list[Trajectory]) -> None:
        """Set the teacher's logprobs on every trajectory with a prompt (one request for them all)."""
        scored = [t for t in trajectories if t.prompt_ids]
        if not scored:
            return
        rows = [(t.prompt_ids, t.response_ids) for t in scored]
        logprobs, lineage = teacher.score(rows, self.temperature)
        for t, lp in zip(scored, logprobs, strict=True):
            t.teacher_logprobs, t.teacher = [float(x) for x in lp], lineage

    def close(self) -> None:
        self.inner.close()


def with_teachers(runner: GroupRunner, configs: list[TeacherConfig], temperature: float, tokenizer: Any) -> GroupRunner:
    """`runner` whose groups the `configs` teachers score (the runner itself when there are none); `tokenizer`:
    the student's, whose vocabulary each teacher's must be."""
    if not configs:
        return runner
    fingerprint = tokenizer_fingerprint(tokenizer) if tokenizer is not None else None
    teachers = {c.pool: Teacher(c, fingerprint) for c in configs}
    return TeacherRunner(runner, teachers, configs, temperature)
