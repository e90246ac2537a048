"""The rollout service's loop and what it owns: `loop.py` (`RolloutService`: follow weights, admit claimed
tasks into the runner, advance it, commit), `ledger.py` (the claim ledger: claims, renewals, the commit
window), `follow.py` (the engines following published weights), `metrics.py` (the counters and the
rollout_stats windows), `runners.py` (which runner plays a pool: looked up by workflow and scorer),
`children.py` (engine processes that die with the service)."""

from lakeflow.raas.service.loop import RolloutService

__all__ = ["RolloutService"]
