"""`lakeflow launch`: one run config rendered for a cluster (Kubernetes, SkyPilot, Slurm), one object per
process, and applied with the cluster's own client (`targets.launch`, `targets.apply`). Nothing is imported
here, so the pods' liveness probe (`python -m lakeflow.launch.probe`) loads only the store."""
