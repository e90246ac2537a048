"""Sandboxed workspaces of agent episodes (docs/sandbox.md): a `command` episode runs in its own sandbox
(bubblewrap or a container) on its own writable copy of a base, reaches only the gateway, and what it
changed is stored in the lake when it ends.

`checks.py`: which sandbox a pool gets (`build_sandbox`); `binds.py`: the host paths it shows read-only;
`runner.py`: one episode from start to stored state; `bwrap.py`, `docker.py`, `kubernetes.py`: the
backends; `base.py`: bases per workspace source; `copies.py` and `mounts.py`: each episode's overlay or
copy; `relay.py` and `routes.py`: the gateway in a sandbox with no network; `changes.py`, `state.py`,
`lake_states.py`: a change as a content-addressed state in the lake, read back and restored.
"""

from lakeflow.raas.workspace.runner import EpisodeSandbox, SandboxRun, Then

__all__ = ["EpisodeSandbox", "SandboxRun", "Then"]
