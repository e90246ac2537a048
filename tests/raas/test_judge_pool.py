"""A judge a small model can be: lakeflow's own endpoint (`ModelServer`, what `lakeflow serve` runs for a run's
judge pool) answering chat completions and constrained choices with their logprobs, checked against a plain
forward of the same tiny model; the `choice` verdict read as an expected score through the real `openai`
client; a judge that cannot give the format refused early; its failures counted in the service's stats."""

from __future__ import annotations

import math
from typing import Any

import openai
import pytest

from lakeflow.errors import JudgeRefusedError
from lakeflow.raas.config import ServeConfig
from lakeflow.raas.scoring.judge.client import Judge
from lakeflow.raas.scoring.judge.prompts import pointwise_messages
from lakeflow.raas.service.metrics import RaasStats
from lakeflow.raas.serving.model_server import ModelServer
from tests.raas.judge_helpers import drive, judge_config
from tests.raas.judge_server import completion
from tests.raas.multi_helpers import Scripted, make_task

torch = pytest.importorskip("torch")

CHOICES = ["0", "1", "2"]


@pytest.fixture
def served(engine: Any, tiny_dir: str) -> Any:
    server = ModelServer(ServeConfig(id="judge", model=tiny_dir), engine=engine)
    yield server
    server.close()


def test_the_served_model_answers_chats_and_weighs_choices(served: Any, engine: Any) -> None:
    client = openai.OpenAI(base_url=served.url, api_key="none", max_retries=0)
    messages = [{"role": "user", "content": "What is 3 + 4?"}]
    reply = client.chat.completions.create(model="judge", messages=messages, max_tokens=6, temperature=0)  # type: ignore[arg-type]
    (expected,) = engine.generate([messages], 1, 6, 0.0)[0]
    assert reply.choices[0].message.content == expected.text
    assert reply.usage is not None and reply.usage.completion_tokens == len(expected.token_ids)

    constrained = {"structured_outputs": {"choice": CHOICES}}
    reply = client.chat.completions.create(
        model="judge",
        messages=messages,  # type: ignore[arg-type]
        temperature=0,
        logprobs=True,
        top_logprobs=5,
        extra_body=constrained,
    )
    content = reply.choices[0].logprobs.content  # type: ignore[union-attr]
    got = {t.token: t.logprob for t in content[0].top_logprobs}  # type: ignore[index]
    # a plain forward of the same model: the next token's log-probabilities, renormalised over the choices
    ids = engine.encode_chat(messages)
    with torch.inference_mode():
        last = torch.log_softmax(engine.model(torch.tensor([ids])).logits[0, -1].float(), dim=-1)
    raw = {c: float(last[engine.tokenizer.encode(c, add_special_tokens=False)[0]]) for c in CHOICES}
    norm = math.log(sum(math.exp(v) for v in raw.values()))
    assert got.keys() == raw.keys() and all(abs(got[c] - (raw[c] - norm)) < 1e-4 for c in CHOICES)
    assert reply.choices[0].message.content == max(raw, key=lambda c: raw[c])

    with pytest.raises(openai.NotFoundError, match="ask for 'judge'"):
        client.chat.completions.create(model="other", messages=messages)  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError, match="structured_outputs"):
        client.chat.completions.create(
            model="judge", messages=messages, extra_body={"structured_outputs": {"json": {}}}
        )  # type: ignore[arg-type]
    assert [m.id for m in client.models.list()] == ["judge"]


def test_a_choice_verdict_is_the_expected_score_over_the_choices(judge_server: Any) -> None:
    top = [{"token": "1", "logprob": math.log(0.6)}, {"token": " 0", "logprob": math.log(0.2)}]
    top.append({"token": "x", "logprob": math.log(0.2)})
    body = completion("1")
    body["choices"][0]["logprobs"] = {"content": [{"token": "1", "logprob": math.log(0.6), "top_logprobs": top}]}
    server = judge_server(lambda request: _answer((200, body)))
    choice = {"verdict": "choice", "choices": {"0": 0.0, "1": 1.0}}
    judge = Judge(judge_config(server.url, **choice))
    verdict = judge.ask(pointwise_messages("r", "t", "7", "7", choice["choices"]), None)
    assert verdict.scores == [pytest.approx(0.75)] and verdict.probs == {"0": 0.2, "1": 0.6}
    sent = server.bodies[-1]
    assert sent["logprobs"] is True and "structured_outputs" not in sent  # an endpoint judge: not constrained
    judge.close()

    text_only = judge_server(lambda request: _answer("0."))  # no logprobs: the choice the text is
    judge = Judge(judge_config(text_only.url, **choice, constrained=True))
    verdict = judge.ask(pointwise_messages("r", "t", "7", "8", choice["choices"]), None)
    assert verdict.scores == [0.0] and verdict.probs is None
    assert text_only.bodies[-1]["structured_outputs"] == {"choice": ["0", "1"]}
    judge.close()


def test_a_judge_that_cannot_give_the_format_stops_the_service_early(
    judge_server: Any, judge_runner: Any, tok: Any
) -> None:
    server = judge_server(lambda request: _answer("I think the answer is fine."))
    runner = judge_runner(Scripted(tok, ["7", "8", "7"]), judge_config(server.url, retries=1, refuse_after=4))
    stats = RaasStats(judge=runner.scorer.tally)  # as the service's runner registry hangs it
    for i in range(3):
        runner.add(f"t{i}", make_task(1))
    with pytest.raises(JudgeRefusedError, match=r"4 unusable replies and no verdict .*set `verdict: choice`"):
        drive(runner, n=3)
    beat = stats.snapshot()
    assert beat["judge_unusable"] == {"no-score": 4} and beat["judge_verdicts"] == 0
    assert beat["judge_failing_since"] is not None
    assert not any(k.startswith("judge_") for k in RaasStats().snapshot())  # a service without a judge: none


async def _answer(value: Any) -> Any:
    return value
