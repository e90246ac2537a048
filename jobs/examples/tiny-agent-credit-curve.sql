-- Reward per weights version of jobs/examples/tiny-agent-credit-{episode,turn}.yaml, from a run's lake:
--   lakeflow sql --lake runs/tiny-agent-credit-turn/lake -f jobs/examples/tiny-agent-credit-curve.sql
-- Per 10 versions that sampled the episodes (version 0: the untrained model): episodes, the mean reward,
-- the share that called `lookup()`, the share answered with the right digit (reward 1), mean turns.
SELECT policy_version // 10 * 10 AS versions,
       count(*) AS episodes,
       round(avg(reward), 3) AS mean_reward,
       round(avg(CASE WHEN coalesce(json_extract(extra, '$.tool_calls.lookup')::INT, 0) > 0 THEN 1 ELSE 0 END), 3) AS tool_call_rate,
       round(avg(CASE WHEN reward = 1 THEN 1 ELSE 0 END), 3) AS right_digit,
       round(avg(json_extract(extra, '$.turns')::INT), 2) AS turns
FROM trajectories
WHERE model_id = 'policy'
GROUP BY 1
ORDER BY 1;
