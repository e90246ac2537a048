-- Replay the most recently served groups.
SELECT group_id FROM candidates ORDER BY last_served_step DESC, arrival DESC LIMIT $n
