"""The metric tables' columns: each table's name, its columns, their Arrow types and what each means (units
included), defined once here; docs/metrics.md is checked against them (tests/lake/test_metrics.py). How rows
are written and read is `metrics.py`."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from lakeflow.errors import InputError

_TS = pa.timestamp("us", tz="UTC")
_F, _I, _S = pa.float64(), pa.int64(), pa.string()


@dataclass(frozen=True)
class MetricColumn:
    """One column of a metric table: name, Arrow type and what it means (units included)."""

    name: str
    type: pa.DataType
    doc: str


def _common(what: str) -> list[MetricColumn]:
    return [
        MetricColumn("created_at", _TS, f"When the {what} ended and the row was made (the writer's UTC clock)."),
        MetricColumn("writer_id", _S, "Unique id of the writer instance (<process name>-<12 hex>)."),
        MetricColumn("model_id", _S, "Model the row is about."),
    ]


_TIMINGS = [
    ("wait_s", "Seconds the trainer blocked waiting for its batch."),
    ("step_s", "Seconds of the whole step after the batch arrived (training, snapshot hand-over)."),
    ("load_s", "Seconds of the read of the batch object and its payload (possibly in the prefetch thread)."),
    ("snapshot_s", "Seconds of the copy of weights and optimizer state for publishing."),
    ("snapshot_block_s", "Seconds this step's first optimizer step waited for the previous copy."),
    ("publish_block_s", "Seconds the step waited for the previous step's writes."),
    ("publish_s", "Seconds the previous step's background writes took (checkpoint, heartbeat, weights)."),
    ("io_block_s", "Lake I/O on the trainer's critical path, seconds (see StepStats in trainer/stats.py)."),
]

_MISMATCH = [  # trainer/mismatch.py: over the sampled tokens of rows whose version's weights the trainer holds or kept
    (
        "mismatch_tokens",
        "Sampled tokens whose engine-trainer mismatch was measured (rows of the step's own version in its first "
        "minibatch, rows of a kept past version in its first microbatch); null when there were none.",
    ),
    ("mismatch_mean", "Mean |trainer logprob - engine logprob| of those tokens, nats: numerics, not policy change."),
    ("mismatch_p99", "99th percentile of that |delta| (under torchrun: the largest rank's)."),
    ("mismatch_max", "Largest |delta|."),
    ("mismatch_over_0_1", "Share of those tokens with |delta| > 0.1 nats."),
    ("mismatch_over_1", "Share of those tokens with |delta| > 1 nat."),
]

_CORRECTION = [  # trainer/correction.py: the loss's engine-trainer mismatch correction; null without one
    (
        "is_weight",
        "Mean importance weight pi_prox / pi_behaviour multiplying the trained tokens' loss under a mismatch "
        "correction (after truncation; a dropped token counts 0); null with correction none.",
    ),
    ("is_truncated", "Share of trained tokens whose weight was truncated at the cap (correction tis), else null."),
    (
        "is_masked",
        "Share of trained tokens dropped from the loss by the correction (mis: weight outside [1/cap, cap]; "
        "decoupled: above cap), else null.",
    ),
]

TABLES: dict[str, tuple[MetricColumn, ...]] = {
    "trainer_steps": (
        *_common("step"),
        MetricColumn("step", _I, "Training step N: trained batch N, starting from weight version N."),
        MetricColumn("version", _I, "Weight version the step published (N + 1)."),
        MetricColumn("samples", _I, "Samples (rows) trained."),
        MetricColumn("tokens", _I, "Trained tokens (response tokens with loss_mask 1)."),
        MetricColumn("response_len_mean", _F, "Trained tokens per sample (tokens / samples)."),
        MetricColumn("reward_mean", _F, "Mean reward of the trained samples."),
        MetricColumn("loss", _F, "Objective value, token mean, averaged over the step's minibatches."),
        MetricColumn(
            "kl",
            _F,
            "KL(current policy || behaviour policy) in nats per trained token, k3 estimator importance-weighted "
            "because the tokens were sampled by the behaviour policy: with r = exp(logp - old_logp), the token "
            "mean of r*log(r) - r + 1 (>= 0, unbiased). Measured before each minibatch's optimizer step; "
            "reported whatever the KL penalty coefficient.",
        ),
        MetricColumn(
            "entropy",
            _F,
            "Token entropy of the current policy in nats, -sum_v p(v) log p(v) of softmax(logits / temperature) "
            "at each trained token's position, token mean (before the minibatch's optimizer step).",
        ),
        MetricColumn(
            "kl_ref",
            _F,
            "The KL penalty's estimate of KL(policy || reference = version 0) per token (the configured "
            "estimator); null when the penalty coefficient is 0.",
        ),
        MetricColumn("clip_frac", _F, "Share of trained tokens clipped (grpo) or dropped (m2po)."),
        MetricColumn(
            "ratio",
            _F,
            "Mean importance ratio exp(logp - old_logp) over trained tokens (exp(logp - prox_logp) under a "
            "mismatch correction).",
        ),
        MetricColumn("m2", _F, "Mean squared log-ratio over trained tokens (m2po only, else null)."),
        *(MetricColumn(name, _F, doc) for name, doc in _CORRECTION),
        MetricColumn("grad_norm", _F, "Largest global gradient norm of the step's minibatches, before clipping."),
        MetricColumn("lr", _F, "AdamW learning rate."),
        *(MetricColumn(name, _F, doc) for name, doc in _MISMATCH),
        *(MetricColumn(name, _F, doc) for name, doc in _TIMINGS),
        MetricColumn("extra", _S, "Other numbers the objective reported, as a JSON object."),
    ),
    "mismatch": (  # trainer/mismatch.py: the trainer_steps mismatch columns, apart per version and service
        *_common("step"),
        MetricColumn("step", _I, "Training step whose first minibatch (a microbatch, for a past version) measured it."),
        MetricColumn("version", _I, "Weight version that sampled the tokens (their behaviour policy)."),
        MetricColumn(
            "raas_id",
            _S,
            "Rollout service that wrote the rows: its engine is rollout_stats.engine of the same raas_id.",
        ),
        MetricColumn("tokens", _I, "Sampled tokens measured."),
        MetricColumn("mean", _F, "Mean |trainer logprob - engine logprob| of those tokens, nats."),
        MetricColumn("p99", _F, "99th percentile of that |delta|."),
        MetricColumn("max", _F, "Largest |delta|."),
        MetricColumn("over_0_1", _F, "Share of those tokens with |delta| > 0.1 nats."),
        MetricColumn("over_1", _F, "Share of those tokens with |delta| > 1 nat."),
    ),
    "rollout_stats": (
        *_common("window"),
        MetricColumn("window_start", _TS, "When the window started."),
        MetricColumn("raas_id", _S, "Rollout service id."),
        MetricColumn("task_type", _S, "Reward family of the window's groups (one row per task type)."),
        MetricColumn("region", _S, "Region label of the service."),
        MetricColumn("engine", _S, "Inference engine (hf, vllm)."),
        MetricColumn("groups", _I, "Groups committed in the window."),
        MetricColumn("samples", _I, "Samples committed."),
        MetricColumn("tokens", _I, "Response tokens committed."),
        MetricColumn("gen_s", _F, "Seconds spent generating and scoring those groups."),
        MetricColumn("tokens_per_s", _F, "tokens / gen_s: generation speed while generating."),
        MetricColumn("reward_mean", _F, "Mean reward of the samples."),
        MetricColumn("finish_stop", _I, "Samples that ended with a stop token."),
        MetricColumn("finish_length", _I, "Samples cut off by max_new_tokens."),
        MetricColumn("finish_other", _I, "Samples with another finish reason (error, ...)."),
        MetricColumn("response_len_mean", _F, "Mean response length in tokens."),
        MetricColumn("response_len_max", _I, "Longest response in tokens."),
        MetricColumn("weights_version", _I, "Weight version of the model loaded at the end of the window."),
        MetricColumn("latest_version", _I, "Newest published version the service saw (LATEST)."),
        MetricColumn("version_lag", _I, "latest_version - weights_version."),
        MetricColumn("pulls", _I, "Weight pulls of this model in the window (on its first row of the window, else 0)."),
        MetricColumn("pull_bytes", _I, "Bytes those pulls fetched (first row of the model, else 0)."),
        MetricColumn("pull_s", _F, "Seconds those pulls and engine reloads took (first row of the model, else 0)."),
        MetricColumn("abandoned", _I, "Groups dropped because their claim was lost (first row of the model, else 0)."),
        MetricColumn("judge_verdicts", _I, "A judge's usable verdicts in the window (first row; null: no judge)."),
        MetricColumn("judge_unusable", _I, "A judge's replies without a usable verdict in the window (first row)."),
        MetricColumn("judge_errors", _I, "A judge's failed requests in the window (unreachable, timeout; first row)."),
        MetricColumn("judge_held", _I, "Groups held at the window's end because their verdicts failed (first row)."),
    ),
    "dataflow_stats": (
        *_common("window"),
        MetricColumn("window_start", _TS, "When the window started."),
        MetricColumn("window_s", _F, "Window length, seconds."),
        MetricColumn("shards", _I, "Shards of this model ingested in the window."),
        MetricColumn("samples_ingested", _I, "Samples of this model ingested (quarantined rows excluded)."),
        MetricColumn("ingest_samples_per_s", _F, "samples_ingested / window_s."),
        MetricColumn("quarantined_rows", _I, "Rows of this model's shards quarantined in the window."),
        MetricColumn("groups_kept", _I, "Complete groups the filter policy kept."),
        MetricColumn("groups_filtered", _I, "Complete groups the filter policy dropped."),
        MetricColumn("dropped", _I, "Fresh groups dropped without being served (staleness), in the window."),
        MetricColumn("batches", _I, "Batches served in the window."),
        MetricColumn("samples_served", _I, "Samples in those batches."),
        MetricColumn("pending_groups", _I, "Incomplete groups waiting for samples, at the end of the window."),
        MetricColumn("fresh_groups", _I, "Kept groups not yet served (fresh pool), at the end."),
        MetricColumn("replay_groups", _I, "Groups in the replay pool, at the end."),
        MetricColumn("tasks_open", _I, "Outstanding tasks, at the end."),
        MetricColumn("tasks_claimed", _I, "Outstanding tasks with a claim, at the end."),
        MetricColumn("trainer_version", _I, "The model's newest published weight version."),
        MetricColumn("next_step", _I, "The next batch step to serve."),
        MetricColumn("recent_groups", _I, "The model's newest complete groups (at most 64), at the end."),
        MetricColumn("recent_kept", _I, "Of those, groups the filter kept (few: the trainer starves)."),
        MetricColumn("recent_all_solved", _I, "Of those, dropped for zero advantage with mean reward > 0.5."),
        MetricColumn("recent_all_failed", _I, "Of those, dropped for zero advantage with mean reward <= 0.5."),
        MetricColumn("trainer_wait_fraction", _F, "Balance report (all models): trainers' wait / (wait + step)."),
        MetricColumn("raas", _I, "Balance report: live rollout services."),
        MetricColumn("target_raas", _I, "Balance report: the seed formula's target pool size."),
    ),
    "eval": (
        *_common("evaluation"),
        MetricColumn("policy_version", _I, "Weight version evaluated."),
        MetricColumn("dataset", _S, "Held-out dataset name."),
        MetricColumn("prompts", _I, "Prompts evaluated."),
        MetricColumn("n_samples", _I, "Completions per prompt (1 with greedy decoding)."),
        MetricColumn("temperature", _F, "Sampling temperature; 0 means greedy."),
        MetricColumn("threshold", _F, "A completion passes when its reward is >= this."),
        MetricColumn("pass_at_1", _F, "Mean over prompts of the share of passing completions (unbiased pass@1)."),
        MetricColumn("k", _I, "The k of pass_at_k (= n_samples)."),
        MetricColumn("pass_at_k", _F, "Mean over prompts of the unbiased pass@k estimate (Chen et al. 2021)."),
        MetricColumn("reward_mean", _F, "Mean reward of every completion, scored by the task's reward function."),
        MetricColumn("response_len_mean", _F, "Mean completion length in tokens."),
        MetricColumn("finish_length", _F, "Share of completions cut off by max_new_tokens."),
        MetricColumn("gen_s", _F, "Seconds the evaluation of this version took (generation and scoring)."),
        MetricColumn(
            "turns_mean", _F, "Agent evaluations: mean turns per episode (a gateway episode's model requests)."
        ),
        MetricColumn("tool_calls_mean", _F, "Agent evaluations: mean tool calls per episode (environments)."),
        MetricColumn("ends", _S, 'Agent evaluations: episodes per end, JSON ({"done": 12, "agent_error": 1}).'),
    ),
    "rescores": (
        *_common("re-scoring"),
        MetricColumn("name", _S, "The re-scoring's name (`lakeflow rescore --name`; default: the reward's)."),
        MetricColumn(
            "reward_spec",
            _S,
            "The reward that scored it: a function's shipped name, import path or entry point, or the judge's or "
            "reward model's section as JSON (its type and the fields given).",
        ),
        MetricColumn("sample_id", _S, "The stored sample re-scored (trajectories.sample_id)."),
        MetricColumn("prompt_id", _S, "Its prompt."),
        MetricColumn("reward", _F, "The new reward; NULL where a judge or reward model gave none (see reason)."),
        MetricColumn(
            "reason",
            _S,
            "Why, as the reward says it (correct, wrong, overlong, judged, reward_model...); 'failed: <why>' "
            "with a NULL reward when the judge or reward model gave up on the sample's group.",
        ),
        MetricColumn("stored_reward", _F, "The reward the sample was trained with (trajectories.reward)."),
    ),
}
TRACKED = ("trainer_steps", "mismatch", "rollout_stats", "dataflow_stats", "eval")  # the time series of trackers


def schema(table: str) -> pa.Schema:
    """The Arrow schema of a metric table; ValueError for an unknown one."""
    if table not in TABLES:
        raise InputError(f"unknown metric table {table!r}; known: {', '.join(TABLES)}")
    return pa.schema([pa.field(c.name, c.type) for c in TABLES[table]])
