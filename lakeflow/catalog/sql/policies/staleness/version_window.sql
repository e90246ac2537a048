-- A group may train step $step if its oldest token came from weights at most
-- $max_staleness versions older. Applied to fresh and replay groups alike.
SELECT group_id FROM candidates WHERE $step - policy_version <= $max_staleness
