-- Skip prompts the policy already solves: moving average of the share of positive rewards
-- above $solved_threshold (0.95 by default). Never-seen prompts are submitted.
SELECT prompt_id, coalesce(pass_ema, 0) <= $solved_threshold AS submit
FROM candidates
ORDER BY issued, prompt_order
LIMIT $n * 4
