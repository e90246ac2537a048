"""Teachers: the served model's `/v1/score` route against a plain forward of the same tiny model; a pool's
runner whose groups a served teacher scores, the logprobs and the teacher's lineage in the sample record;
a teacher of another vocabulary refused; an unreachable one dropping the group; which teacher scores which
dataset."""

from __future__ import annotations

import json
import logging
import socket
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from lakeflow.errors import ConfigError
from lakeflow.lake.schema import normalize_sample
from lakeflow.raas.config import RaasConfig, ServeConfig, TeacherConfig, teacher_for
from lakeflow.raas.scoring.teacher import Teacher, TeacherRunner
from lakeflow.raas.service.runners import build_runner
from lakeflow.raas.serving.model_server import ModelServer
from lakeflow.raas.trajectory import sample_row
from tests.raas.multi_helpers import make_task

torch = pytest.importorskip("torch")


@pytest.fixture
def served(engine: Any, tiny_dir: str) -> Any:
    server = ModelServer(ServeConfig(id="teacher", model=tiny_dir), engine=engine)
    yield server
    server.close()


def _post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        with e:  # its response is open until closed
            return e.code, json.loads(e.read())


def test_the_score_route_gives_the_logprobs_of_a_plain_forward(served: Any, engine: Any) -> None:
    prompt = engine.encode_chat([{"role": "user", "content": "What is 3 + 4?"}])
    rows = [(prompt, [20, 21, 22]), (prompt[:5], [30])]
    body = {"model": "teacher", "temperature": 0.7, "rows": [{"prompt_ids": p, "response_ids": r} for p, r in rows]}
    status, answer = _post(f"{served.url}/score", body)
    assert status == 200 and answer["model"] == "teacher" and len(answer["version"]) == 12
    assert answer["vocab_size"] == len(engine.tokenizer) and answer["tokenizer"]
    for (p, r), got in zip(rows, answer["logprobs"], strict=True):
        with torch.inference_mode():  # one row alone, no padding: log softmax(logits / T) at each response token
            logits = engine.model(torch.tensor([p + r])).logits[0].float() / 0.7
            want = torch.log_softmax(logits, dim=-1)[torch.arange(len(p) - 1, len(p) + len(r) - 1), torch.tensor(r)]
        assert got == pytest.approx(want.tolist(), abs=1e-4)
    assert _post(f"{served.url}/score", {**body, "model": "other"})[0] == 404
    empty = {"model": "teacher", "rows": [{"prompt_ids": [], "response_ids": [1]}]}
    status, answer = _post(f"{served.url}/score", empty)
    assert status == 400 and "prompt_ids" in answer["error"]["message"]


def test_a_teacher_scores_every_sample_of_the_pool_and_the_record_names_it(served: Any, engine: Any) -> None:
    teacher = TeacherConfig(pool="teacher", endpoint=served.url)
    config = RaasConfig(teachers=[teacher], max_new_tokens=4, temperature=0.7)
    runner = build_runner(config, {"m": engine}, {"policy": "m"}, "m")
    assert isinstance(runner, TeacherRunner)
    runner.add("t", make_task(3))
    (group,) = runner.advance(0.0)
    runner.close()
    assert not group.dropped and len(group.trajectories) == 3
    for t in group.trajectories:
        assert t.teacher == f"teacher@{served.version}" and t.teacher_logprobs is not None
        with torch.inference_mode():
            ids = t.prompt_ids + t.response_ids
            logits = engine.model(torch.tensor([ids])).logits[0].float() / 0.7
            steps = torch.arange(len(t.prompt_ids) - 1, len(ids) - 1)
            want = torch.log_softmax(logits, dim=-1)[steps, torch.tensor(t.response_ids)]
        assert t.teacher_logprobs == pytest.approx(want.tolist(), abs=1e-4)
        # the same weights sampled the tokens: the teacher's logprobs are the behaviour logprobs
        assert t.teacher_logprobs == pytest.approx(t.response_logprobs, abs=1e-3)
        row = normalize_sample(sample_row(make_task(3), t, "m", {"m": 0}, "r", ""), 0)
        assert row["teacher"] == t.teacher and row["teacher_logprobs"] == t.teacher_logprobs


def test_a_teacher_of_another_vocabulary_is_refused_and_an_unreachable_one_drops_the_group(
    served: Any, engine: Any
) -> None:
    prompt = engine.encode_chat([{"role": "user", "content": "hi"}])
    with pytest.raises(ConfigError, match="another vocabulary"):
        Teacher(TeacherConfig(pool="teacher", endpoint=served.url), tokenizer="0123456789ab").score(
            [(prompt, [5])], 1.0
        )
    with pytest.raises(ConfigError, match="has no endpoint"):
        Teacher(TeacherConfig(pool="teacher"))
    gone = TeacherConfig(pool="teacher", endpoint="http://127.0.0.1:9/v1", retries=0, timeout_s=2)
    runner = build_runner(RaasConfig(teachers=[gone], max_new_tokens=2), {"m": engine}, {"policy": "m"}, "m")
    runner.add("t", make_task(2))
    (group,) = runner.advance(0.0)
    assert group.dropped.startswith("teacher:") and group.trajectories == []


def test_the_teacher_of_a_dataset_is_the_one_that_names_it_else_the_catch_all() -> None:
    add = TeacherConfig(pool="adder", datasets=["add"])
    other = TeacherConfig(pool="general")
    assert teacher_for([other, add], "add") is add and teacher_for([other, add], "gsm8k") is other
    assert teacher_for([add], "gsm8k") is None
    with pytest.raises(ValueError, match="named by 'adder' and 'again'"):
        RaasConfig(teachers=[add, TeacherConfig(pool="again", datasets=["add"])])
    with pytest.raises(ValueError, match="at most one teacher"):
        RaasConfig(teachers=[other, TeacherConfig(pool="again")])


def test_a_pool_admits_nothing_until_its_teacher_answers(
    engine: Any, tiny_dir: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A served teacher may start after the pool (`lakeflow launch`): the pool waits for it, saying so."""
    with socket.socket() as s:  # a port nothing listens on yet: the teacher binds it later
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    teacher = TeacherConfig(pool="teacher", endpoint=f"http://127.0.0.1:{port}/v1")
    runner = build_runner(RaasConfig(teachers=[teacher], max_new_tokens=2), {"m": engine}, {"policy": "m"}, "m")
    with caplog.at_level(logging.INFO, logger="lakeflow.raas.scoring.teacher"):
        assert not runner.can_admit(2)
        assert "teacher teacher at http://127.0.0.1" in caplog.text and "does not answer yet" in caplog.text
        server = ModelServer(ServeConfig(id="teacher", model=tiny_dir), port=port, engine=engine)
        try:
            deadline = time.monotonic() + 60
            while not runner.can_admit(2):  # asked again after its backoff (1 s, then 2 s)
                assert time.monotonic() < deadline, caplog.text
                time.sleep(0.1)
            assert "teacher teacher answers at" in caplog.text
            runner.add("t", make_task(2))
            (group,) = runner.advance(0.0)
            assert not group.dropped and all(t.teacher_logprobs for t in group.trajectories)
        finally:
            runner.close()
            server.close()
