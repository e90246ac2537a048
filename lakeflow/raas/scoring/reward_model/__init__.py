"""Reward models: rewards from a sequence-classification model. A pool's `reward: {type: reward_model, ...}`
has a transformers classifier, loaded once inside the rollout service on its own device, score its rlvr
completions in batches (docs/judges.md#reward-models).

`RewardModelConfig` is the config room's (`raas/config/reward_model.py`); `scorer.py`: `RewardModel`, the
loaded model and its batched forward (torch and transformers are imported there only); `model_scorer.py`:
`RewardModelScorer`, its `Scorer`; `check.py`: the checks before a start (the model's architecture and labels,
its files and device here).
"""

from lakeflow.raas.config.reward_model import RewardModelConfig

__all__ = ["RewardModelConfig"]
