-- GRESO (pre-rollout filtering): a prompt whose latest z rollout groups all had zero reward
-- variance is submitted with probability max(p^z, floor); p and floor differ for easy
-- (latest mean reward > 0.5) and hard prompts; the engine adapts $p_easy / $p_hard per
-- version toward target skip shares. After $max_rejections consecutive skips a prompt is
-- submitted regardless (safety valve). u is a reproducible uniform draw per prompt and round.
SELECT
    prompt_id,
    zero_var_streak = 0
        OR rejections >= $max_rejections
        OR (hash(prompt_id, $round) % 1000000) / 1000000.0 < CASE
            WHEN last_mean > 0.5 THEN greatest(pow($p_easy, zero_var_streak), $floor_easy)
            ELSE greatest(pow($p_hard, zero_var_streak), $floor_hard)
        END AS submit
FROM candidates
ORDER BY issued, prompt_order
LIMIT $n * 4
