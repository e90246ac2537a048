-- Replay groups drawn without replacement with probability proportional to mean reward
-- (+0.01 so zero-reward groups keep a chance): Efraimidis-Spirakis keys u^(1/w), with u
-- uniform in (0, 1) from a hash so each step's draw is reproducible.
SELECT group_id
FROM candidates
ORDER BY ln((hash(group_id, $seed) % 1000000 + 1) / 1000001.0) / (greatest(reward_mean, 0) + 0.01) DESC
LIMIT $n
