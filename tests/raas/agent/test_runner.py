"""The agent runner on scripted turns: tool calls parsed and run, errors as observations, limits, tokens."""

from __future__ import annotations

from typing import Any

import pytest

from lakeflow.errors import ConfigError, PluginError
from lakeflow.raas.agent.parsers import hermes
from lakeflow.raas.agent.registry import build_environment
from lakeflow.raas.config import parse_config
from lakeflow.raas.config.environment import EnvironmentConfig
from lakeflow.raas.episodes.environment import EpisodeScheduler
from lakeflow.raas.episodes.workflow import agent
from lakeflow.raas.trajectory import POLICY, Sampling, Trajectory
from tests.raas.agent.helpers import LOGPROB, Calculator, Scripted, call, make_task

SAMPLING = Sampling(max_tokens=256, temperature=0.7)
ENV = "tests.raas.agent.helpers:Calculator"


def _play(engine: Any, n: int = 1, sampling: Sampling = SAMPLING, **env: Any) -> list[Trajectory]:
    config = EnvironmentConfig(name=env.pop("name", ENV), **env)
    return agent(make_task(n), {POLICY: engine}, lambda *_: None, sampling, environment=config)  # type: ignore[arg-type]


def _tool_turns(context: str) -> int:
    return context.count("<|im_start|>tool")


def _then_answer(first: str) -> Any:
    return lambda ctx: first if _tool_turns(ctx) == 0 else "The answer is 7."


def test_a_tool_call_is_run_and_its_answer_appended_once_masked(tok: Any) -> None:
    engine = Scripted(tok, _then_answer(call("add", a=3, b=4)))
    (t,) = _play(engine)
    assert t.reward == 1.0 and t.finish_reason == "stop"
    assert t.extra["turns"] == 2 and t.extra["tool_calls"] == {"add": 1} and t.extra["tool_errors"] == 0
    assert t.extra["turn_rewards"] == [0.1, None] and t.extra["end"] == "done"
    assert "segment" not in t.extra  # one sample per episode
    # the second turn was generated from exactly the stored ids before it
    first, second = engine.contexts
    assert first == t.prompt_ids
    assert second == t.prompt_ids + t.response_ids[: len(second) - len(t.prompt_ids)]
    tail = t.response_ids[len(second) - len(t.prompt_ids) :]
    assert tail == [*tok.encode("The answer is 7.", add_special_tokens=False), tok.eos_token_id]
    # sampled tokens: loss_mask 1 and their logprobs; everything else 0 / 0.0
    sampled = len(tok.encode(call("add", a=3, b=4), add_special_tokens=False)) + 1
    assert t.loss_mask[:sampled] == [1] * sampled and set(t.response_logprobs[:sampled]) == {LOGPROB}
    glue = slice(sampled, len(t.response_ids) - len(tail))
    assert set(t.loss_mask[glue]) == {0} and set(t.response_logprobs[glue]) == {0.0}
    assert tok.decode(t.response_ids[glue]) == "\n<|im_start|>tool\n7<|im_end|>\n<|im_start|>assistant\n"
    # where each turn's sampled tokens end, and a hash of what each turn answered (turn-level credit)
    assert t.extra["turn_ends"] == [sampled, len(t.response_ids)]
    assert len(t.extra["turn_obs"]) == 2 and len(set(t.extra["turn_obs"])) == 2


def test_malformed_calls_are_answered_and_counted(tok: Any) -> None:
    engine = Scripted(tok, _then_answer('<tool_call>{"name": "add", "arguments": {"a": 1</tool_call> <tool_call>x'))
    (t,) = _play(engine)
    assert t.extra["malformed_calls"] == 2 and t.extra["tool_calls"] == {} and t.reward == 1.0
    shown = tok.decode(engine.contexts[1])
    assert "error: malformed tool call: tool call is not JSON" in shown and "unclosed <tool_call>" in shown


def test_unknown_tools_and_bad_arguments_are_tool_errors(tok: Any) -> None:
    engine = Scripted(tok, _then_answer(call("nope") + call("add", a="x", b=1) + call("add", a=1, b=2, c=3)))
    (t,) = _play(engine)
    assert t.extra["tool_calls"] == {"add": 2, "nope": 1} and t.extra["tool_errors"] == 3
    shown = tok.decode(engine.contexts[1])
    assert "error: unknown tool 'nope'; tools: add, slow" in shown
    assert "error: bad arguments: argument 'a' must be integer, got str" in shown
    assert "error: bad arguments: unknown argument(s) 'c'" in shown


def test_a_tool_past_its_time_limit_is_a_timeout(tok: Any) -> None:
    engine = Scripted(tok, _then_answer(call("slow")))
    (t,) = _play(engine, name=ENV, args={"slow_s": 3.0}, tool_timeout_s=0.2)
    assert t.extra["tool_errors"] == 1 and t.reward == 1.0
    assert "error: timeout after 0.2s" in tok.decode(engine.contexts[1])


def test_a_forked_tool_is_killed_at_its_time_limit_and_held_to_its_memory(tok: Any) -> None:
    engine = Scripted(tok, _then_answer(call("slow") + call("add", a=2, b=5)))
    # one limit for both calls: it must stop the slow one and let a forked `add` (fork, run, answer) finish on
    # a busy machine, so it is seconds, not a fraction of one
    (t,) = _play(engine, args={"slow_s": 60.0}, tool_timeout_s=2.0, tool_memory_mb=64)
    shown = tok.decode(engine.contexts[1])
    assert "error: timeout after 2s" in shown and "<|im_start|>tool\n7<|im_end|>" in shown
    assert t.extra["tool_errors"] == 1


def hog(size_mb: int = 512) -> str:
    return str(len(bytearray(size_mb << 20)))


class Hog(Calculator):
    def tools(self) -> list[Any]:
        from lakeflow.raas.agent.env import Tool

        return [Tool("hog", "Allocates.", {"type": "object", "properties": {"size_mb": {"type": "integer"}}}, hog)]


def test_a_forked_tool_over_its_memory_limit_is_an_error(tok: Any) -> None:
    engine = Scripted(tok, _then_answer(call("hog", size_mb=512) + call("hog", size_mb=1)))
    (t,) = _play(engine, name="tests.raas.agent.test_runner:Hog", tool_memory_mb=128)
    shown = tok.decode(engine.contexts[1])
    assert "error: memory limit reached" in shown and f"<|im_start|>tool\n{1 << 20}<|im_end|>" in shown
    assert t.extra["tool_errors"] == 1


def test_max_turns_ends_the_episode_as_truncated(tok: Any) -> None:
    engine = Scripted(tok, lambda ctx: call("add", a=1, b=1))
    sampling = Sampling(max_tokens=256, temperature=0.7, truncated_reward=-1.0)
    (t,) = _play(engine, sampling=sampling, max_turns=3)
    assert t.extra["turns"] == 3 and t.extra["end"] == "max_turns"
    assert t.finish_reason == "length" and t.reward == -1.0 and t.extra["reward_reason"] == "truncated"


def test_running_out_of_episode_tokens_or_context_ends_with_the_reason(tok: Any) -> None:
    (first,) = _play(Scripted(tok, lambda ctx: "It is 2."))
    base = len(first.prompt_ids)  # the first messages with the tools' schemas
    (t,) = _play(Scripted(tok, lambda ctx: call("add", a=1, b=1)), max_episode_tokens=base + 100, max_turns=50)
    assert t.extra["end"] == "max_episode_tokens" and t.finish_reason == "length"
    assert base + 20 < len(t.prompt_ids) + len(t.response_ids) <= base + 100
    (t,) = _play(Scripted(tok, lambda ctx: call("add", a=1, b=1), max_model_len=base + 130), max_turns=50)
    assert t.extra["end"] == "context" and len(t.prompt_ids) + len(t.response_ids) <= base + 130
    # a prompt that leaves no room at all: one empty sample with the reason, never an exception
    (t,) = _play(Scripted(tok, lambda ctx: "never"), max_episode_tokens=16)
    assert t.response_ids == [] and t.extra["end"] == "max_episode_tokens" and t.extra["turns"] == 0


REWRITING = (  # shows only the last assistant turn's content, as reasoning-stripping templates do
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' and not loop.last %}...{% else %}{{ m['content'] }}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_a_template_that_rewrites_history_needs_per_turn_samples(tok: Any) -> None:
    rewriting = type(tok).from_pretrained(tok.name_or_path)
    rewriting.chat_template = REWRITING
    engine = Scripted(rewriting, _then_answer(call("add", a=3, b=4)))
    (t,) = _play(engine)
    assert t.finish_reason == "error" and t.extra["end"] == "template_rewrites_history"
    assert "per_turn_samples" in t.extra["error"]
    engine = Scripted(rewriting, lambda ctx: call("add", a=3, b=4) if _tool_turns(ctx) < 2 else "It is 7.")
    turns = _play(engine, n=2, per_turn_samples=True)
    assert len(turns) == 6 and [t.extra["turn"] for t in turns] == [0, 1, 2] * 2
    # segments: the dataflow counts the group by the turns that start an episode (segment 0)
    assert [(t.extra["segment"], t.extra["segments"]) for t in turns] == [(0, 3), (1, 3), (2, 3)] * 2
    assert len({t.episode_id for t in turns}) == 2 and {t.reward for t in turns} == {1.0}
    for t in turns:  # each turn's prompt is what the engine saw (the two episodes' rounds may interleave)
        assert t.prompt_ids in engine.contexts and set(t.loss_mask) == {1}
    assert "...<|im_end|>" in rewriting.decode(turns[2].prompt_ids)  # the template's own view of turn 0


def test_episodes_of_several_groups_share_each_round(tok: Any) -> None:
    engine = Scripted(tok, _then_answer(call("slow")))
    config = EnvironmentConfig(name=ENV, args={"slow_s": 0.05}, max_concurrent_episodes=8)
    scheduler = EpisodeScheduler(engine, build_environment(config), config, SAMPLING, hermes)
    try:
        for i in range(3):
            scheduler.add(f"g{i}", make_task(2, task_id=f"g{i}"))
        assert scheduler.live_episodes == 6 and not scheduler.can_admit(3) and scheduler.can_admit(2)
        groups = scheduler.run_all()
    finally:
        scheduler.close()
    assert engine.calls[0] == 6  # the first turns of all six episodes in one engine call
    assert sorted(str(g.key) for g in groups) == ["g0", "g1", "g2"]
    assert all(len(g.trajectories) == 2 and {t.reward for t in g.trajectories} == {1.0} for g in groups)


class Broken(Calculator):
    def step(self, turn: Any) -> Any:
        raise RuntimeError("bug in the environment")


def test_an_environment_that_raises_ends_its_episode_with_the_reason(tok: Any) -> None:
    (t,) = _play(Scripted(tok, lambda ctx: "hi"), name="tests.raas.agent.test_runner:Broken")
    assert t.finish_reason == "error" and t.reward == 0.0 and t.extra["end"] == "environment_error"
    assert t.extra["error"] == "step: RuntimeError: bug in the environment"


def test_names_and_sections_are_checked() -> None:
    with pytest.raises(PluginError, match=r"environment\.name: unknown environment 'nope'"):
        build_environment(EnvironmentConfig(name="nope"))
    with pytest.raises(ConfigError, match=r"workflow 'agent' goes with exactly one of an `environment` section"):
        parse_config({"workflow": "agent"})
    with pytest.raises(ConfigError, match=r"other workflows take neither"):
        parse_config({"workflow": "rlvr", "agent": {"program": "m:f"}})
    with pytest.raises(ConfigError, match=r"exactly one"):
        parse_config({"workflow": "agent", "agent": {"program": "m:f"}, "environment": {"name": ENV}})
    with pytest.raises(ConfigError, match=r"exactly one of `program`"):
        parse_config({"workflow": "agent", "agent": {"program": "m:f", "command": ["x"]}})
    config = parse_config({"workflow": "agent", "environment": {"name": ENV, "max_turns": 4}})
    assert config.environment is not None and config.environment.tool_parser == "hermes"
    with pytest.raises(ConfigError, match=r"needs an `environment` section"):
        agent(make_task(1), {}, lambda *_: None, SAMPLING)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"factory\(\*\*environment.args\) failed"):
        _play(None, args={"nope": 1})
