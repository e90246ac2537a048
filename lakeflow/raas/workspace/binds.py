"""The host paths a sandbox shows read-only at the same place (`agent.sandbox.binds`), checked when the
service starts: each made absolute (from the service's working directory) and required to exist; a virtual
environment brings the Python installation it was made from (pyvenv.cfg's `home`), since its interpreter
and standard library live there. The command's relative paths are made absolute too (it starts in
/workspace) and must lie under a bind. A bind the sandbox's uid cannot reach (under /root, mode 0700) is
mounted for it in the episode's own mount namespace (`copies.py`), which an overlay workspace has.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from lakeflow.errors import ConfigError

SYSTEM = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # the default root's own


def host_binds(binds: list[str]) -> list[str]:
    """`binds` as absolute paths, with each virtual environment's Python installation (unless it is under
    this machine's /usr: the default root shows it, and a root of the user's has its own); ConfigError
    naming a missing one."""
    out: list[str] = []
    for given in binds:
        path = os.path.abspath(given)
        if not os.path.exists(path):
            raise ConfigError(
                f"agent.sandbox.binds: {given} does not exist (from {os.getcwd()}): install what it names (a "
                "harness: scripts/install-harnesses) or correct the path"
            )
        out.append(path)
        base = _venv_base(Path(path))
        if base is not None and not under(base, SYSTEM):
            out.append(base)
    unique = list(dict.fromkeys(out))
    return [p for p in unique if not under(p, [q for q in unique if q != p])]  # one under another is shown already


def _venv_base(path: Path) -> str | None:
    """The prefix of the Python a virtual environment at `path` was made from (None: not one)."""
    cfg = path / "pyvenv.cfg"
    if not cfg.is_file():
        return None
    for line in cfg.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            home = Path(value.strip())  # the base interpreter's bin/ folder
            return str(home.parent if home.name == "bin" else home)
    return None


def under(path: str, parents: list[str] | tuple[str, ...]) -> bool:
    """Whether `path` is one of `parents` or inside one."""
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in parents)


def unreachable(path: str) -> str:
    """Why another uid cannot read `path` ('' when it can): the first folder on its way it may not search,
    or the path itself not readable by others."""
    parts = Path(os.path.realpath(path)).parts
    for i in range(1, len(parts)):
        folder = os.path.join(*parts[:i])
        if not os.stat(folder).st_mode & stat.S_IXOTH:
            return f"{folder} is not searchable by other users"
    mode = os.stat(path).st_mode  # of what it names (a link's target)
    wanted = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(mode) else 0)
    return "" if mode & wanted == wanted else f"{path} is not readable by other users"


def sandbox_command(command: list[str], binds: list[str]) -> list[str]:
    """`command` as the sandbox runs it: each relative path (a folder and a name: `agents/run.py`, not a bare
    word that may name a file here by chance) that exists from the service's working directory made absolute
    (the command starts in /workspace); ConfigError when such a path is under no bind."""
    out = []
    for arg in command:
        if "/" not in arg or arg.startswith("-") or os.path.isabs(arg) or not os.path.exists(arg):
            out.append(arg)
            continue
        path = os.path.abspath(arg)
        if not under(path, binds):
            raise ConfigError(
                f"agent.command: {arg} is not in the sandbox: add its folder ({os.path.dirname(path)}) to "
                "agent.sandbox.binds"
            )
        out.append(path)
    return out
