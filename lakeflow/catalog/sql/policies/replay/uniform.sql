-- Replay groups drawn uniformly without replacement; $seed makes each step's draw
-- reproducible.
SELECT group_id FROM candidates ORDER BY hash(group_id, $seed) LIMIT $n
