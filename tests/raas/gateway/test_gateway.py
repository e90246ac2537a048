"""The gateway with real OpenAI clients on 127.0.0.1 and a scripted engine (the tiny model never writes a
tool call): what the agent gets back, and the exact tokens each episode stores."""

from __future__ import annotations

import sys
import time
from typing import Any

from lakeflow.models.tiny import LOOKUP_CALL
from lakeflow.raas.config import HFEngineConfig
from lakeflow.raas.config.agent import AgentConfig, GatewayConfig
from lakeflow.raas.engines import HFEngine
from lakeflow.raas.trajectory import Sampling, sample_row
from tests.raas.agent.helpers import LOGPROB, Scripted, check_trainer_reproduces, make_task, switched_mid_turn

T = 0.8


def lookup_engine(tok: Any) -> Scripted:
    """Calls the tool first, then answers with the digit the tool returned."""

    def reply(context: str) -> str:
        if "<|im_start|>tool\n" not in context:
            return LOOKUP_CALL
        return "It is " + context.rsplit("<|im_start|>tool\n", 1)[1][0]

    return Scripted(tok, reply)


def test_an_openai_client_agent_calls_the_tool_and_its_episode_is_one_exact_context(tok: Any, drive: Any) -> None:
    engine = lookup_engine(tok)
    gateway = GatewayConfig(gather_s=10)  # a round waits for every running episode's request (they all send one)
    driver = drive(engine, AgentConfig(program="lookup_openai:play", args={"call_credit": 0.2}, gateway=gateway))
    driver.add("g", make_task(4, prompt="Value?", answer="7"))
    (group,) = driver.groups()
    assert engine.calls == [4, 4]  # each round's requests in one engine call
    assert len(group.trajectories) == 4 and len({t.episode_id for t in group.trajectories}) == 4
    for t in group.trajectories:
        assert t.reward == 1.0 and t.extra["end"] == "done" and t.extra["requests"] == 2
        assert (t.extra["segment"], t.extra["segments"], t.extra["turns"]) == (0, 1, 2)
        text = tok.decode(t.response_ids)
        assert text.startswith(LOOKUP_CALL + "<|im_end|>\n<|im_start|>tool\n7<|im_end|>\n<|im_start|>assistant\n")
        assert text.endswith("It is 7<|im_end|>")
        sampled = [i for i, m in enumerate(t.loss_mask) if m]
        assert all(t.response_logprobs[i] == LOGPROB for i in sampled)
        assert all(lp == 0.0 for lp, m in zip(t.response_logprobs, t.loss_mask, strict=True) if not m)
        assert '"name": "lookup"' in tok.decode(t.prompt_ids)  # the request's tools, through the template
    contexts = {tuple(c) for c in engine.contexts[4:]}
    stored = {tuple(t.prompt_ids + t.response_ids[: t.loss_mask.index(1, 2)]) for t in group.trajectories}
    assert contexts == stored  # the second request was generated from the stored ids, extended: nothing re-rendered


class HeldFirstCall(Scripted):
    """The lookup script, whose first engine call goes on only once `ready()` (at most 60 s): the requests that
    come in meanwhile wait for the next round."""

    def __init__(self, tok: Any) -> None:
        super().__init__(tok, lookup_engine(tok).reply)
        self.ready: Any = lambda: True

    def generate(self, prompts: Any, n: int, max_tokens: int, temperature: float) -> Any:
        deadline = time.monotonic() + 60
        while not self.calls and not self.ready() and time.monotonic() < deadline:
            time.sleep(0.01)
        return super().generate(prompts, n, max_tokens, temperature)


def test_without_a_gather_window_the_requests_that_come_in_meanwhile_go_together(tok: Any, drive: Any) -> None:
    engine = HeldFirstCall(tok)
    driver = drive(engine, AgentConfig(program="lookup_openai:play"))  # gather_s 0, the default
    episodes = lambda: [e for g in driver.runner.flight.groups.values() for e in g.episodes]  # noqa: E731
    engine.ready = lambda: len(episodes()) == 4 and all(e.busy for e in episodes())  # every first request is in
    driver.add("g", make_task(4, prompt="Value?", answer="7"))
    (group,) = driver.groups()
    assert [t.reward for t in group.trajectories] == [1.0] * 4
    # a round took the first request (or every one already in) and went; the others, arriving while the engine
    # ran, went into the next round together, not one round each
    first = engine.calls[:2] if engine.calls[0] < 4 else engine.calls[:1]
    assert sum(first) == 4, engine.calls
    assert sum(engine.calls) == 8  # two requests per episode


def test_the_responses_api_and_streaming_reach_the_same_tokens(tok: Any, drive: Any) -> None:
    engine = lookup_engine(tok)
    driver = drive(engine, AgentConfig(program="tests.raas.gateway.programs:responses_lookup"))
    driver.add("r", make_task(2, prompt="Value?", answer="3"))
    (group,) = driver.groups()
    assert [t.reward for t in group.trajectories] == [1.0, 1.0]
    assert all(t.extra["segments"] == 1 and t.extra["turns"] == 2 for t in group.trajectories)

    engine = Scripted(tok, lambda context: "a streamed 5")
    driver = drive(engine, AgentConfig(program="tests.raas.gateway.programs:streams"))
    driver.add("s", make_task(2, answer="5"))
    (group,) = driver.groups()
    assert [t.extra["reward_reason"] for t in group.trajectories] == ["correct", "correct"]  # the answer, scored


def test_an_agent_that_edits_its_history_continues_as_new_segments(tok: Any, drive: Any) -> None:
    engine = Scripted(tok, lambda context: f"turn {context.count('Go on.')}")
    config = AgentConfig(program="tests.raas.gateway.programs:chat_turns", args={"turns": 4, "trim": True})
    driver = drive(engine, config)
    driver.add("t", make_task(2))
    (group,) = driver.groups()
    by_episode: dict[str, list[Any]] = {}
    for t in group.trajectories:
        by_episode.setdefault(t.episode_id, []).append(t)
    assert len(by_episode) == 2
    for segments in by_episode.values():
        # turns 1-2 extend one context; turn 3 sends a trimmed history (a new segment) that turn 4 extends
        assert [(s.extra["segment"], s.extra["turns"]) for s in segments] == [(0, 2), (1, 2)]
        assert all(s.extra["segments"] == 2 and s.reward == 0.5 for s in segments)
        assert tok.decode(segments[0].response_ids).count("Go on.") == 1
        assert tok.decode(segments[1].prompt_ids).count("Go on.") == 2  # the trimmed history, as sent
        assert tok.decode(segments[1].prompt_ids).count("turn 0") == 0  # ... without the dropped turn


def test_a_command_line_agent_trains_through_its_environment_variables(tok: Any, drive: Any) -> None:
    engine = lookup_engine(tok)
    command = [sys.executable, "examples/agents/lookup_cli.py"]
    driver = drive(engine, AgentConfig(command=command))
    driver.add("c", make_task(2, prompt="Value?", answer="4"))
    (group,) = driver.groups()
    assert [t.reward for t in group.trajectories] == [1.0, 1.0]
    assert all(t.extra["turns"] == 2 for t in group.trajectories)


def test_programs_that_fail_end_their_own_episode_with_the_reason(tok: Any, drive: Any) -> None:
    engine = Scripted(tok, lambda context: "fine")
    cases = {
        "raises": ("RuntimeError: the agent broke", "agent_error"),
        "garbage": ("the program returned list", "agent_error"),
        "sleeps": ("timeout: the episode ran past 1 s", "timeout"),
    }
    for name, (error, end) in cases.items():
        program = f"tests.raas.gateway.programs:{name}"
        config = AgentConfig(program=program, max_seconds=1, failed_reward=-1, on_failure="score")
        driver = drive(engine, config)
        driver.add(name, make_task(2))
        (group,) = driver.groups()
        for t in group.trajectories:
            assert t.extra["error"].startswith(error) and t.extra["end"] == end
            assert t.reward == -1 and t.finish_reason == "error" and t.response_ids == []
    bad_exit = [sys.executable, "-c", "import sys; print('oops'); print('trace', file=sys.stderr); sys.exit(3)"]
    driver = drive(engine, AgentConfig(command=bad_exit, failed_reward=-1, on_failure="score"))
    driver.add("exit", make_task(1))
    (group,) = driver.groups()
    (t,) = group.trajectories
    assert t.extra["error"].startswith("the command exited with 3") and t.reward == -1
    assert t.extra["stderr"] == "trace\n" and group.failures == {"agent_error": 1}


def test_a_group_with_a_failed_episode_is_given_up_not_trained_with_a_zero(tok: Any, drive: Any) -> None:
    engine = Scripted(tok, lambda context: "fine")
    driver = drive(engine, AgentConfig(program="tests.raas.gateway.programs:every_other_fails"))  # reissue: default
    for key in ("a", "b"):
        driver.add(key, make_task(2, task_id=f"every-other-{key}"))
    for group in driver.groups(2):
        assert group.trajectories == [] and group.failures == {"agent_error": 1}
        assert group.dropped.startswith("1 of 2 episodes failed") and "the harness broke" in group.dropped
    driver = drive(engine, AgentConfig(program="tests.raas.gateway.programs:never_asks", on_failure="score"))
    driver.add("c", make_task(1))
    (group,) = driver.groups()
    assert group.failures == {"no_requests": 1} and group.trajectories[0].extra["end"] == "no_requests"


def test_gateway_episodes_of_the_real_engine_match_the_trainer_segments_included(
    engine: Any, tiny_dir: str, drive: Any
) -> None:
    """TITO: the trainer's forward over every stored segment reproduces the engine's logprobs (fp32)."""
    config = AgentConfig(program="tests.raas.gateway.programs:chat_turns", args={"turns": 4, "trim": True})
    driver = drive(engine, config, Sampling(8, T))
    driver.add("t", make_task(3))
    (group,) = driver.groups()
    assert max(t.extra["segment"] for t in group.trajectories) >= 1  # at least one episode continued in a segment
    worst = check_trainer_reproduces(tiny_dir, group.trajectories, T)
    print(f"max |trainer - hf engine| over sampled tokens of gateway segments: {worst:.2e}")
    assert worst <= 1e-3


def test_each_turn_is_stamped_with_the_version_that_sampled_it(tok: Any, drive: Any) -> None:
    engine = lookup_engine(tok)
    versions = iter([4, 5, 5, 5])  # weights_update: interrupt loaded version 5 after the first round

    driver = drive(engine, AgentConfig(program="lookup_openai:play"), version=lambda: next(versions))
    driver.add("g", make_task(1, prompt="Value?", answer="7"))
    (group,) = driver.groups()
    (t,) = group.trajectories
    assert t.extra["turn_versions"] == [4, 5] and t.extra["turns"] == 2
    second = t.loss_mask.index(1, t.loss_mask.index(0))  # the first token of the second turn
    assert t.extra["token_versions"] == [[0, 4], [second, 5]]
    assert sample_row(make_task(1), t, "policy", {"policy": 5}, "raas", "")["policy_version"] == 4


def test_requests_sampled_in_chunks_continue_on_a_new_version_mid_turn(
    tiny_dir: str, tiny_v1_dir: str, drive: Any
) -> None:
    """weights_update: interrupt with interrupt_chunk_tokens through the gateway: turns are sampled 3 tokens a
    round, version 1 is loaded before the second round (the first turn's second chunk), and every stored
    logprob is the trainer's under the version that sampled that token (and not under the other)."""
    engine = HFEngine(HFEngineConfig(), seed=0)
    engine.load(tiny_dir)
    rounds = [0]

    def version() -> int:  # asked once per round that generates, before it generates
        rounds[0] += 1
        if rounds[0] == 2:
            engine.load(tiny_v1_dir)
        return int(rounds[0] >= 2)

    gateway = GatewayConfig(gather_s=10)  # the first round waits for all three episodes' requests
    config = AgentConfig(program="tests.raas.gateway.programs:chat_turns", args={"turns": 3}, gateway=gateway)
    driver = drive(engine, config, Sampling(8, T), version=version, chunk_tokens=3)
    driver.add("c", make_task(3))
    (group,) = driver.groups()
    assert all(t.extra["turns"] == 3 and t.extra["segments"] == 1 for t in group.trajectories)
    assert any(switched_mid_turn(t) for t in group.trajectories)
    for t in group.trajectories:
        row = sample_row(make_task(3), t, "policy", {"policy": 1}, "raas", "")
        assert (row["policy_version"], row["max_version"]) == (0, 1)
    worst = check_trainer_reproduces({0: tiny_dir, 1: tiny_v1_dir}, group.trajectories, T)
    swapped = check_trainer_reproduces({0: tiny_v1_dir, 1: tiny_dir}, group.trajectories, T)
    print(f"max |trainer - hf engine| per token version through the gateway: {worst:.2e} (swapped: {swapped:.2e})")
    assert worst <= 1e-3 < swapped
