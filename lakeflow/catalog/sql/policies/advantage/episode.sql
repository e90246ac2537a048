-- Episode credit (GRPO; what the trainer computes when no advantage policy is set): every token of a
-- sample gets its group-normalised reward, (reward - group mean) / (group std + $eps), from the group
-- statistics stored at ingest. Turn NULL: one advantage for the whole sample.
SELECT sample_id, NULL::INTEGER AS turn, (reward - group_mean) / (group_std + $eps) AS advantage
FROM candidates
