"""A rollout pool's `teachers:` section: frozen models that score every sampled token of the pool's samples
(on-policy distillation, docs/distillation.md). Read when the config loads; no request is made here."""

from __future__ import annotations

from pydantic import Field

from lakeflow.configfile import StrictConfig


class TeacherConfig(StrictConfig):
    """One teacher: a served model (a `serve:` pool of the run, or any `lakeflow serve`) that gives the logprob
    of each response token of the samples of the tasks it covers; they are written beside the sample."""

    pool: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
        description="The id of the served model: a `serve:` pool of the same run config (`lakeflow run` starts "
        "it and sets `endpoint`), or the id a `lakeflow serve` elsewhere answers to.",
    )
    endpoint: str | None = Field(
        None,
        description="The served model's base URL, ending in /v1 (http://teacher-host:8000/v1). Set by `lakeflow run` "
        "for a pool of the run; give it for a rollout service started on its own.",
    )
    datasets: list[str] | None = Field(
        None,
        min_length=1,
        description="The task datasets (the tasks' and samples' `dataset` column) this teacher scores; None: "
        "every dataset no earlier teacher of the list names. A sample no teacher covers is written without "
        "teacher logprobs.",
    )
    timeout_s: float = Field(120.0, gt=0, description="Seconds one scoring request may take.")
    retries: int = Field(
        5,
        ge=0,
        le=100,
        description="Retries of a failed request (unreachable, 5xx), with backoff, before the "
        "group is dropped (never written; its task is issued again).",
    )
    backoff_s: float = Field(1.0, gt=0, description="The first retry's wait; doubled each time, at most 30 s.")


def teacher_for(teachers: list[TeacherConfig], dataset: str) -> TeacherConfig | None:
    """The teacher that scores samples of `dataset`: the first that names it, else the first that names no
    datasets; None when none covers it."""
    named = next((t for t in teachers if t.datasets is not None and dataset in t.datasets), None)
    return named or next((t for t in teachers if t.datasets is None), None)


def check_teachers(teachers: list[TeacherConfig]) -> None:
    """ValueError for two teachers that name the same dataset, or more than one that names none."""
    seen: dict[str, str] = {}
    catch_all = [t.pool for t in teachers if t.datasets is None]
    if len(catch_all) > 1:
        raise ValueError(f"teachers: {catch_all} all name no datasets; at most one teacher may score every dataset")
    for t in teachers:
        for d in t.datasets or []:
            if d in seen:
                raise ValueError(f"teachers: dataset {d!r} is named by {seen[d]!r} and {t.pool!r}: give it to one")
            seen[d] = t.pool
