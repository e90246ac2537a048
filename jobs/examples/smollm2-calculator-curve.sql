-- The learning curve of jobs/examples/smollm2-calculator.yaml, from its lake:
--   lakeflow sql --lake runs/smollm2-calculator/lake -f jobs/examples/smollm2-calculator-curve.sql
-- Per weights version that sampled the episodes (version 0: the warmed-up model, before any RL step): the
-- share of episodes that called the tool, the share answered right (each task is a fresh product, drawn
-- once, so this is held-out accuracy at the rollout temperature), and the mean turns per episode.
SELECT policy_version AS version,
       count(*) AS episodes,
       round(avg(CASE WHEN coalesce(json_extract(extra, '$.tool_calls.multiply')::INT, 0) > 0 THEN 1 ELSE 0 END), 3) AS tool_call_rate,
       round(avg(CASE WHEN reward = 1 THEN 1 ELSE 0 END), 3) AS accuracy,
       round(avg(json_extract(extra, '$.turns')::INT), 2) AS turns
FROM trajectories
WHERE model_id = 'policy'
GROUP BY 1
ORDER BY 1;
