-- Serve fresh groups in arrival order.
SELECT group_id FROM candidates ORDER BY arrival LIMIT $n
