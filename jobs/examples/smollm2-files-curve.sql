-- The learning curve of jobs/examples/smollm2-files.yaml, from its lake:
--   lakeflow sql --lake runs/smollm2-files/lake -f jobs/examples/smollm2-files-curve.sql
-- Per weights version: the held-out tasks' pass@1 (whole episodes of the harness, greedy, every 4 versions) and
-- how those episodes ended; the rollouts sampled from that version (one row per episode: its first segment):
-- their mean reward (the task's test passed), the share that submitted (end `done`), model requests per episode.
WITH episodes AS (
    SELECT policy_version AS version, reward, json_extract_string(extra, '$.end') AS ended,
           CAST(json_extract(extra, '$.requests') AS DOUBLE) AS requests
    FROM trajectories
    WHERE model_id = 'policy' AND CAST(json_extract(extra, '$.segment') AS INTEGER) = 0
), rollouts AS (
    SELECT version, count(*) AS episodes, avg(reward) AS solved, avg(CAST(ended = 'done' AS DOUBLE)) AS submitted,
           avg(requests) AS requests
    FROM episodes GROUP BY 1
), heldout AS (
    SELECT policy_version AS version, pass_at_1, turns_mean, ends FROM eval WHERE model_id = 'policy'
)
SELECT v.version,
       round(h.pass_at_1, 3) AS heldout_pass1,
       round(h.turns_mean, 2) AS heldout_turns,
       h.ends AS heldout_ends,
       r.episodes,
       round(r.solved, 3) AS rollout_solved,
       round(r.submitted, 3) AS rollout_submitted,
       round(r.requests, 2) AS rollout_requests
FROM (SELECT version FROM rollouts UNION SELECT version FROM heldout) v
LEFT JOIN rollouts r USING (version) LEFT JOIN heldout h USING (version)
ORDER BY v.version;
