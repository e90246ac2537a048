-- Per-turn group normalisation: the discounted return G_t of turn_return.sql, normalised among the
-- group's turns with the same index (turn t of every episode of the group that reached it):
-- (G_t - mean_t) / (std_t + $eps). A turn index only one episode reached gets 0 (nothing to compare).
WITH r AS (
    SELECT t.sample_id, t.group_id, t.sequence_id, t.turn,
           coalesce(t.reward, 0) + CASE WHEN t.final THEN c.reward ELSE 0 END AS r
    FROM turns t JOIN candidates c USING (sample_id)
),
g AS (
    SELECT a.sample_id, a.group_id, a.turn, sum(power($gamma, b.turn - a.turn) * b.r) AS ret
    FROM r a JOIN r b ON b.sequence_id = a.sequence_id AND b.group_id = a.group_id AND b.turn >= a.turn
    GROUP BY a.sample_id, a.group_id, a.turn
)
SELECT sample_id, turn, (ret - avg(ret) OVER w) / (coalesce(stddev_samp(ret) OVER w, 1.0) + $eps) AS advantage
FROM g
WINDOW w AS (PARTITION BY group_id, turn)
