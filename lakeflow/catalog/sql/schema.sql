-- The dataflow catalog (DuckDB): groups of every committed sample and the state of
-- serving. Payload stays in the Parquet shards; rows here point at them (shard_idx, row).
-- Everything here is rebuilt from the lake on restart (catalog checkpoints + commits +
-- batch objects + task objects), so this database is a cache, never the record.
-- Tables with a _ckpt column are append-only and checkpointed incrementally.

CREATE TABLE shards (               -- committed shards that were ingested
    shard_idx    INTEGER PRIMARY KEY,
    shard        VARCHAR NOT NULL,
    commit_key   VARCHAR NOT NULL,
    model_id     VARCHAR NOT NULL,
    rows         INTEGER NOT NULL,   -- rows ingested (quarantined rows excluded)
    ingested_at  TIMESTAMPTZ NOT NULL,
    _ckpt        INTEGER NOT NULL
);

-- One 64-bit hash per ingested sample id: duplicate detection without keeping the ids.
-- (Sample metadata itself is read from the shards: the `samples` view of `lakeflow sql`.)
CREATE TABLE sample_hashes (
    sid_hash UBIGINT NOT NULL,
    _ckpt    INTEGER NOT NULL
);

-- Groups (the n_samples episodes of one prompt for one model) still waiting for samples. A group
-- split over several shards accumulates here; its statistics are computed when complete, that is
-- when it holds n_samples episodes (an episode may be stored as several samples: extra.segment).
CREATE TABLE pending (
    model_id       VARCHAR NOT NULL,
    group_id       VARCHAR NOT NULL,
    prompt_id      VARCHAR NOT NULL,
    task_id        VARCHAR NOT NULL,
    n              INTEGER NOT NULL,  -- samples
    episodes       INTEGER NOT NULL,  -- samples that start an episode (all but extra.segment > 0)
    policy_version BIGINT NOT NULL,   -- oldest of its samples
    arrival        BIGINT NOT NULL,   -- newest of its samples
    sample_ids     VARCHAR[] NOT NULL,
    shard_idx      INTEGER[] NOT NULL,
    rows           INTEGER[] NOT NULL,
    rewards        DOUBLE[] NOT NULL,
    PRIMARY KEY (model_id, group_id)
);

-- Every complete group, with its statistics and what the filter policy decided.
CREATE TABLE groups (
    model_id       VARCHAR NOT NULL,
    group_id       VARCHAR NOT NULL,
    prompt_id      VARCHAR NOT NULL,
    task_id        VARCHAR NOT NULL,
    n              INTEGER NOT NULL,
    reward_mean    DOUBLE NOT NULL,
    reward_std     DOUBLE NOT NULL,    -- unbiased; 1.0 for a singleton group
    zero_adv       BOOLEAN NOT NULL,   -- every reward of the group equal (within 1e-9 x max(1, |reward|))
    policy_version BIGINT NOT NULL,
    arrival        BIGINT NOT NULL,
    kept           BOOLEAN NOT NULL,   -- passed the post-rollout filter
    filter_policy  VARCHAR NOT NULL,
    _ckpt          INTEGER NOT NULL
);

-- Serving state: kept groups never served (fresh) and served groups (replay pool, bounded).
CREATE TABLE fresh (
    model_id VARCHAR, group_id VARCHAR, prompt_id VARCHAR, n INTEGER, reward_mean DOUBLE,
    reward_std DOUBLE, zero_adv BOOLEAN, policy_version BIGINT, arrival BIGINT,
    sample_ids VARCHAR[], shard_idx INTEGER[], rows INTEGER[], rewards DOUBLE[]
);
CREATE TABLE replay (
    model_id VARCHAR, group_id VARCHAR, prompt_id VARCHAR, n INTEGER, reward_mean DOUBLE,
    reward_std DOUBLE, zero_adv BOOLEAN, policy_version BIGINT, arrival BIGINT,
    sample_ids VARCHAR[], shard_idx INTEGER[], rows INTEGER[], rewards DOUBLE[],
    served_count INTEGER, last_served_step BIGINT
);

CREATE TABLE served (               -- one row per group per batch: the consumption record
    model_id VARCHAR NOT NULL, step BIGINT NOT NULL, group_id VARCHAR NOT NULL,
    kind VARCHAR NOT NULL,           -- 'fresh' | 'replay'
    _ckpt INTEGER NOT NULL
);
CREATE TABLE dropped (              -- fresh groups never served, and why (e.g. stale)
    model_id VARCHAR NOT NULL, group_id VARCHAR NOT NULL, step BIGINT NOT NULL,
    reason VARCHAR NOT NULL, _ckpt INTEGER NOT NULL
);
CREATE TABLE batches (
    model_id VARCHAR NOT NULL, step BIGINT NOT NULL, fresh_groups INTEGER NOT NULL,
    replay_groups INTEGER NOT NULL, samples INTEGER NOT NULL, created_at TIMESTAMPTZ NOT NULL,
    _ckpt INTEGER NOT NULL
);

-- Pre-rollout: the run's prompts, what rollouts taught us about each, and issued tasks.
CREATE TABLE prompts (
    model_id VARCHAR NOT NULL, prompt_id VARCHAR NOT NULL, prompt_order BIGINT NOT NULL,
    prompt VARCHAR NOT NULL, answer VARCHAR NOT NULL, task_type VARCHAR NOT NULL, dataset VARCHAR NOT NULL
);
CREATE TABLE prompt_stats (
    model_id VARCHAR NOT NULL,
    prompt_id VARCHAR NOT NULL,
    groups INTEGER NOT NULL,          -- complete groups seen
    pass_ema DOUBLE,                  -- moving average of the share of positive rewards
    last_mean DOUBLE,                 -- mean reward of the latest group
    zero_var_streak INTEGER NOT NULL, -- latest consecutive groups with zero reward variance
    rejections INTEGER NOT NULL,      -- consecutive times curation skipped it
    issued INTEGER NOT NULL,          -- tasks issued for it
    PRIMARY KEY (model_id, prompt_id)
);
CREATE TABLE tasks (                -- outstanding tasks (rebuilt from the tasks/ prefix)
    model_id VARCHAR NOT NULL, task_id VARCHAR NOT NULL, prompt_id VARCHAR NOT NULL,
    attempt INTEGER NOT NULL, issued_at TIMESTAMPTZ NOT NULL,
    claimed_by VARCHAR, claim_expires TIMESTAMPTZ
);

CREATE TABLE quarantine (           -- rejected input: which object, how many rows, why
    key VARCHAR NOT NULL, rows INTEGER NOT NULL, reason VARCHAR NOT NULL, quarantined_at TIMESTAMPTZ NOT NULL,
    _ckpt INTEGER NOT NULL
);
-- The lake's `rescores` metric table (`lakeflow rescore`), loaded by the dataflow process when a model's reward
-- policy is not `stored`: what reward policies read. Not checkpointed: read again from the lake on a restart.
CREATE TABLE rescores (
    sample_id VARCHAR NOT NULL, model_id VARCHAR, name VARCHAR NOT NULL, reward DOUBLE, reason VARCHAR,
    created_at TIMESTAMPTZ, writer_id VARCHAR
);
CREATE TABLE weights (model_id VARCHAR PRIMARY KEY, version BIGINT NOT NULL);
CREATE TABLE table_log (            -- the compacted table's log entries this dataflow committed (retention obeys only these)
    version BIGINT NOT NULL, sha256 VARCHAR NOT NULL, recorded_at TIMESTAMPTZ NOT NULL, _ckpt INTEGER NOT NULL
);
