-- Serve the groups produced by the oldest weights first (they are closest to going stale),
-- arrival order among equals.
SELECT group_id FROM candidates ORDER BY policy_version, arrival LIMIT $n
