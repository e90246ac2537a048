"""The trainer's messages cross a process boundary: each one comes back from pickle equal to itself."""

from __future__ import annotations

import pickle

import pytest

from lakeflow.errors import WeightsConflictError
from lakeflow.trainer.messages import (
    Checkpoint,
    Checkpointed,
    Closed,
    Failed,
    Published,
    Ready,
    Request,
    Step,
    Stop,
    WriterReply,
)
from lakeflow.trainer.shared import SlotLayout, flatten
from tests.trainer.helpers import step_stats, tensors


def test_every_message_round_trips_through_pickle() -> None:
    skeleton, found = flatten({"state": {"w": {"exp_avg": tensors(0)["w"]}}, "param_groups": [{"lr": 1e-3}]})
    checkpoint = Checkpoint(3, "psm_opt", SlotLayout.of(found), skeleton, b'{"version": 3}')
    stats = step_stats(2)
    messages: list[Request | WriterReply] = [
        Step(3, "psm_a", stats, checkpoint),
        Step(3, "psm_a", stats),
        checkpoint,
        Stop(),
        Ready(),
        Published(3, "psm_a", "psm_b", stats),
        Checkpointed(3, "psm_opt"),
        Checkpointed(3, None),
        Closed(),
    ]
    for message in messages:
        assert pickle.loads(pickle.dumps(message)) == message


def test_a_failure_carries_the_writers_exception() -> None:
    back = pickle.loads(pickle.dumps(Failed(WeightsConflictError("only one trainer may run per model"))))
    assert isinstance(back.error, WeightsConflictError) and str(back.error) == "only one trainer may run per model"


def test_messages_are_frozen() -> None:
    with pytest.raises(AttributeError):
        Checkpointed(3, None).version = 4  # type: ignore[misc]
