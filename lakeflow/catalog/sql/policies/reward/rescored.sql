-- Train on a re-scoring: each sample's newest reward in the lake's `rescores` table under the name $rescore
-- (`lakeflow rescore --name`). A sample with none there, or whose judge or reward model gave none (reward
-- NULL), is left out: the dataflow quarantines it, so no stored reward stands in for a missing new one.
SELECT c.sample_id, r.reward
FROM candidates c
JOIN (
    SELECT sample_id, reward FROM rescores WHERE name = $rescore
    QUALIFY row_number() OVER (PARTITION BY sample_id ORDER BY created_at DESC, writer_id DESC) = 1
) r USING (sample_id)
WHERE r.reward IS NOT NULL
