-- Step groups (GiGPO-style): episode credit plus $step_weight times a step advantage. Turns of the
-- group that answered the same observation (equal obs_hash: the same anchor state) form a step group;
-- a turn's step advantage is its discounted return G_t (as in turn_return.sql) normalised within its
-- step group. A turn with no observation hash or alone in its step group gets episode credit only.
WITH r AS (
    SELECT t.sample_id, t.group_id, t.sequence_id, t.turn, t.obs_hash,
           coalesce(t.reward, 0) + CASE WHEN t.final THEN c.reward ELSE 0 END AS r
    FROM turns t JOIN candidates c USING (sample_id)
),
g AS (
    SELECT a.sample_id, a.group_id, a.turn, any_value(a.obs_hash) AS obs_hash,
           sum(power($gamma, b.turn - a.turn) * b.r) AS ret
    FROM r a JOIN r b ON b.sequence_id = a.sequence_id AND b.group_id = a.group_id AND b.turn >= a.turn
    GROUP BY a.sample_id, a.group_id, a.turn
),
step AS (
    SELECT sample_id, turn,
           CASE WHEN obs_hash IS NULL THEN 0.0
                ELSE (ret - avg(ret) OVER w) / (coalesce(stddev_samp(ret) OVER w, 1.0) + $eps) END AS adv
    FROM g
    WINDOW w AS (PARTITION BY group_id, obs_hash)
)
SELECT s.sample_id, s.turn, (c.reward - c.group_mean) / (c.group_std + $eps) + $step_weight * s.adv AS advantage
FROM step s JOIN candidates c USING (sample_id)
