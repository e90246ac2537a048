-- Curriculum over the dataset's parts (the `dataset` column: a `type: mix` dataset names its parts, easiest
-- first). Prompts come first from the earliest part not yet solved; a part is solved once its newest 32
-- complete groups (16 at least) have a mean reward of at least $solved_threshold. When every part is solved,
-- the last part first. Within a part: least-issued first, then dataset order. Every prompt is submitted.
WITH parts AS (
    SELECT dataset, min(prompt_order) AS first FROM prompts WHERE model_id = $model_id GROUP BY dataset
),
recent AS (
    SELECT p.dataset, g.reward_mean
    FROM groups g JOIN prompts p USING (model_id, prompt_id)
    WHERE g.model_id = $model_id
    QUALIFY row_number() OVER (PARTITION BY p.dataset ORDER BY g.arrival DESC) <= 32
),
solved AS (
    SELECT dataset FROM recent GROUP BY dataset HAVING count(*) >= 16 AND avg(reward_mean) >= $solved_threshold
),
serving AS (
    SELECT coalesce(
        (SELECT min(first) FROM parts WHERE dataset NOT IN (SELECT dataset FROM solved)),
        (SELECT max(first) FROM parts)
    ) AS first
)
SELECT c.prompt_id, TRUE AS submit
FROM candidates c JOIN parts p USING (dataset)
ORDER BY p.first = (SELECT first FROM serving) DESC, c.issued, c.prompt_order
LIMIT $n
