"""Children die with their parent: a rollout service's engine processes (vLLM's EngineCore and its
workers) and anything else it starts end when it ends, kill -9 included.

vLLM 0.32 starts EngineCore with multiprocessing and nothing in it watches the process that started it
(only EngineCore's own workers watch EngineCore, through a pipe), so a killed service leaves an orphaned
EngineCore holding a core or a GPU's memory. `guard_children` makes the service the leader of its own
process group (its children inherit the group) and starts a watchdog outside the group that the kernel
signals when the service dies (`PR_SET_PDEATHSIG`, set by the watchdog on itself); it then kills the
service's process group. The sandbox's programs run in sessions of their own and are ended by their
own means (bubblewrap's `--die-with-parent`, rlimits on CPU time).
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys

log = logging.getLogger("lakeflow.raas")

# The watchdog (run as `python -c`): it asks to be sent SIGUSR1 when its parent dies, checks the parent
# did not die before that, waits, then SIGKILLs the parent's process group (never itself: it has its own).
_WATCHDOG = """
import ctypes, os, signal, sys
parent, group = int(sys.argv[1]), int(sys.argv[2])
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
if ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGUSR1), 0, 0, 0) != 0:  # 1: PR_SET_PDEATHSIG
    sys.exit(2)
if os.getppid() == parent:
    signal.sigwait({signal.SIGUSR1})
try:
    os.killpg(group, signal.SIGKILL)
except ProcessLookupError:
    pass
"""


def guard_children() -> subprocess.Popen[bytes] | None:
    """Make every process this one starts from now on end when it ends (Linux); returns the watchdog,
    or None where that is not possible (no prctl, or the process cannot lead its own group)."""
    if not sys.platform.startswith("linux"):
        return None
    with contextlib.suppress(PermissionError):  # a session leader leads its group already
        os.setpgid(0, 0)
    group = os.getpgrp()
    if group != os.getpid():
        log.warning("cannot lead a process group of its own: engine processes may outlive a killed service")
        return None
    watchdog = subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(group)],
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # outside the group it kills
    )
    return watchdog
