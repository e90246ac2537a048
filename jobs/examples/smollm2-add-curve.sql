-- The learning curve of jobs/examples/smollm2-add.yaml, from its lake:
--   lakeflow sql --lake runs/smollm2-add/lake -f jobs/examples/smollm2-add-curve.sql
-- Per weights version: held-out greedy pass@1 (`lakeflow eval`, every 4 versions), the mean reward of
-- the batch that trained it, and where the time went: rolling out one batch (8 groups of 8, on the
-- previous version), the training step, and the writer's publish (off the critical path: `blocked_s`
-- is what the step waited for it; `wait_s` what it waited for its batch), and the curriculum's part the
-- rollouts on that version drew most (two-digit, three-digit, four-digit).
WITH steps AS (
    SELECT version, reward_mean, CAST(json_extract(extra, '$.compute_s') AS DOUBLE) AS train_s,
           publish_s, publish_block_s + snapshot_block_s AS blocked_s, wait_s
    FROM trainer_steps WHERE model_id = 'policy'
), rollout AS (
    SELECT weights_version + 1 AS version, sum(gen_s) / nullif(sum(groups), 0) * 8 AS rollout_s
    FROM rollout_stats WHERE model_id = 'policy' AND groups > 0 GROUP BY 1
), part AS (
    SELECT policy_version + 1 AS version, mode(dataset) AS part FROM trajectories WHERE model_id = 'policy' GROUP BY 1
), heldout AS (
    SELECT policy_version AS version, pass_at_1 FROM eval WHERE model_id = 'policy'
)
SELECT v.version,
       round(h.pass_at_1, 3) AS heldout_pass1,
       round(s.reward_mean, 3) AS train_reward,
       round(r.rollout_s, 1) AS rollout_s,
       round(s.train_s, 1) AS train_s,
       round(s.publish_s, 1) AS publish_s,
       round(s.blocked_s, 2) AS blocked_s,
       round(s.wait_s, 1) AS wait_s,
       p.part
FROM (SELECT version FROM steps UNION SELECT version FROM heldout) v
LEFT JOIN steps s USING (version) LEFT JOIN rollout r USING (version) LEFT JOIN heldout h USING (version)
LEFT JOIN part p USING (version)
ORDER BY v.version;
