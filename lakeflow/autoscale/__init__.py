"""`lakeflow autoscale`: size each model's rollout pool from what the lake says about production and
consumption. `rule` is the decision (pure), `observe` reads the lake, `actuators` change the pool (local
processes, a Kubernetes Deployment, SkyPilot clusters), `controller` ties them together."""
