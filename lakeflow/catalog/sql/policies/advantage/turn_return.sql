-- Discounted turn returns: turn t gets G_t = sum over its sequence's turns k >= t of $gamma^(k - t) * r_k,
-- where r_k is the environment's reward for turn k (0 where it gave none) plus, on the episode's last
-- turn, the episode's reward. G is then normalised across every turn of the group's episodes,
-- (G_t - mean) / (std + $eps): one baseline per group, as GRPO, so each turn is credited with what
-- followed it rather than with the whole episode. With $gamma = 1 and no per-turn rewards every turn
-- of an episode has the same G (its reward).
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
WINDOW w AS (PARTITION BY group_id)
