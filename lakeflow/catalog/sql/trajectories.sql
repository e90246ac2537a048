-- The trajectory table: one row per sample (one completion of one policy).
-- This is the schema of every Parquet shard under trajectories/model=<m>/date=<d>/;
-- lakeflow/lake/schema.py defines the same columns in Arrow and is checked against
-- this file by tests/lake/test_schema.py. Payload columns (the four arrays) are read
-- only for the samples a batch needs; everything else is metadata the catalog ingests.
CREATE TABLE trajectories (
    -- ids
    sample_id         VARCHAR   NOT NULL,  -- unique across the lake
    episode_id        VARCHAR   NOT NULL,  -- one (multi-policy) episode
    group_id          VARCHAR   NOT NULL,  -- the n samples of one prompt
    prompt_id         VARCHAR   NOT NULL,
    task_id           VARCHAR   NOT NULL,
    -- routing
    model_id          VARCHAR   NOT NULL,
    role              VARCHAR   NOT NULL,
    -- versions
    policy_version    BIGINT    NOT NULL,  -- oldest weights that produced any token
    max_version       BIGINT    NOT NULL,  -- newest weights that produced any token
    -- payload
    prompt_ids        INTEGER[] NOT NULL,
    response_ids      INTEGER[] NOT NULL,
    response_logprobs FLOAT[]   NOT NULL,  -- behaviour logprobs, one per response token
    loss_mask         UTINYINT[] NOT NULL, -- 0 for tool or other-role tokens
    -- outcome
    reward            DOUBLE    NOT NULL,  -- finite
    finish_reason     VARCHAR   NOT NULL,  -- stop | length | abort | error | tool
    -- context
    task_type         VARCHAR   NOT NULL,
    dataset           VARCHAR   NOT NULL,
    raas_id           VARCHAR   NOT NULL,
    region            VARCHAR   NOT NULL,
    created_at        TIMESTAMPTZ NOT NULL,
    extra             VARCHAR   NOT NULL,  -- JSON object
    -- added in schema version 2 (a shard written before reads it as NULL)
    token_versions    STRUCT("start" INTEGER, "version" BIGINT)[],  -- [start, version] runs of response tokens; NULL: all policy_version
    -- added in schema version 3 (on-policy distillation; NULL: no teacher scored the sample)
    teacher_logprobs  FLOAT[],   -- the teacher's logprob of each response token
    teacher           VARCHAR    -- the teacher that gave them: <served id>@<version>
);
