"""The SQL of completing groups (`Catalog.complete_groups`): which samples start an episode (a group is
complete when it holds `n_samples` of them), a complete group's statistics, staged from `pending`, and the
fold of new groups' rewards into `prompt_stats`, which curation policies read."""

from __future__ import annotations

# Whether a sample starts an episode, from its `extra` JSON: all but continuation segments, whose
# `extra.segment` is an integer > 0 (an episode stored as several samples: one per turn with
# `per_turn_samples`). Anything else (no key, 0, another JSON type, text that is not JSON) starts one;
# the CASE parses only valid JSON, so no `extra` can make the statement fail.
STARTS_EPISODE = """
    CASE WHEN NOT json_valid(extra) THEN true
         WHEN json_type(extra, '$.segment') = 'UBIGINT' THEN json_extract_string(extra, '$.segment') = '0'
         ELSE true END"""
# The sample references a pool row holds, one list element per sample, in arrival order.
REFS = "sample_ids, shard_idx, rows, rewards"
# A group has zero advantage when its rewards differ by no more than this, relative to their
# magnitude (at least 1): rewards that differ only by float rounding ([0.1 + 0.2, 0.3, …]) would
# otherwise give advantages of ~1e-11 that fill a batch slot and teach nothing.
ZERO_ADV_TOLERANCE = 1e-9
# The sample standard deviation of a group's rewards, scaled by their largest magnitude s first
# (std(r) = s * std(r / s), with every r / s in [-1, 1]) so that no finite reward can overflow it:
# DuckDB's stddev_samp raises on overflow, which would stop the dataflow loop. 0 when every reward is 0.
SAFE_REWARD_STD = (
    "coalesce(list_max(list_transform(rewards, r -> abs(r))) * list_stddev_samp(list_transform(rewards, "
    "r -> r / nullif(list_max(list_transform(rewards, x -> abs(x))), 0))), 0)"
)
# The model's pending groups that have $n episodes, with their statistics over their samples (binds
# $tolerance, $model_id, $n).
COMPLETE_GROUPS = f"""
    SELECT model_id, group_id, prompt_id, task_id, n,
           list_avg(rewards) AS reward_mean,
           CASE WHEN n > 1 THEN {SAFE_REWARD_STD} ELSE 1.0 END AS reward_std,
           list_max(rewards) - list_min(rewards)
               <= $tolerance * greatest(1.0, abs(list_max(rewards)), abs(list_min(rewards)))
               AS zero_adv,
           policy_version, arrival, {REFS}
    FROM pending WHERE model_id = $model_id AND episodes >= $n"""
# Fold the staged groups (`_complete`) into prompt_stats, in arrival order, in one statement (binds $d,
# the pass-rate average's decay). Per prompt with k new groups (shares s_0..s_{k-1} of positive
# rewards, oldest first): pass_ema <- d^k * old + sum_j (1 - d) d^(k-1-j) s_j (the first group ever
# seeds it with s_0); last_mean <- the newest group's mean; zero_var_streak grows by k if every new
# group had zero variance, else restarts at the number of trailing zero-variance groups.
FOLD_PROMPT_STATS = """
    WITH c AS (
        SELECT model_id, prompt_id, arrival, zero_adv, reward_mean,
               len(list_filter(rewards, lambda x: x > 0)) / len(rewards) AS share,
               row_number() OVER (PARTITION BY model_id, prompt_id ORDER BY arrival) - 1 AS j,
               count(*) OVER (PARTITION BY model_id, prompt_id) AS k
        FROM _complete
    ),
    a AS (
        SELECT model_id, prompt_id, any_value(k) AS k,
               sum(CASE WHEN j > 0 THEN (1 - $d) * pow($d, k - 1 - j) * share ELSE 0 END) AS tail,
               max(CASE WHEN j = 0 THEN share END) AS share0,
               arg_max(reward_mean, arrival) AS last_mean,
               max(CASE WHEN NOT zero_adv THEN j END) AS last_varied
        FROM c GROUP BY model_id, prompt_id
    )
    INSERT INTO prompt_stats
    SELECT a.model_id, a.prompt_id, coalesce(s.groups, 0) + a.k,
           CASE WHEN s.pass_ema IS NULL THEN pow($d, a.k - 1) * a.share0 + a.tail
                ELSE pow($d, a.k) * s.pass_ema + (1 - $d) * pow($d, a.k - 1) * a.share0 + a.tail END,
           a.last_mean,
           CASE WHEN a.last_varied IS NULL THEN coalesce(s.zero_var_streak, 0) + a.k
                ELSE a.k - 1 - a.last_varied END,
           coalesce(s.rejections, 0), coalesce(s.issued, 0)
    FROM a LEFT JOIN prompt_stats s USING (model_id, prompt_id)
    ON CONFLICT (model_id, prompt_id) DO UPDATE SET groups = excluded.groups,
        pass_ema = excluded.pass_ema, last_mean = excluded.last_mean,
        zero_var_streak = excluded.zero_var_streak"""
