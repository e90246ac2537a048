-- The reward each sample was stored with (what its rollout service scored): the default.
SELECT sample_id, reward FROM candidates
