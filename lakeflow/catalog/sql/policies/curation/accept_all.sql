-- Submit every prompt, least-issued first, then in dataset order (epochs over the dataset).
SELECT prompt_id, TRUE AS submit FROM candidates ORDER BY issued, prompt_order LIMIT $n
