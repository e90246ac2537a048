"""Scoring: what turns generated samples into rewards, beside the reward functions (`raas/rewards.py`) and
an environment's own reward. `runner.py`: the `Scorer` protocol and `ScoredRunner` (generate rlvr groups,
have a scorer score them, hold a group until its scores are ready); `generated.py`: what scored runners
share (one engine call for the admitted groups, the rewards known without a model); `judge/`: a judge model
behind an endpoint; `reward_model/`: a sequence classifier loaded in the service."""
