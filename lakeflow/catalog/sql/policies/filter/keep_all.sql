-- Keep every complete group.
SELECT group_id FROM candidates
