-- Dynamic sampling (DAPO): drop groups whose rewards are all equal; their advantages are
-- all zero, so they carry no policy-gradient signal.
SELECT group_id FROM candidates WHERE NOT zero_adv
