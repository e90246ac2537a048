"""The sandboxed program's processes (`sandbox.py`): its output read under a cap and a deadline, its
process group and uid killed, the uid it runs as when we are root, and the limit a failed run most
likely hit."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import resource
import secrets
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"  # the programs' PATH, and where the sandbox finds its binaries
UID_BASE, UID_SPAN = 1 << 28, 1 << 27  # uids handed to sandboxed programs when we are root


def collect_output(
    proc: subprocess.Popen[bytes],
    output_bytes: int,
    deadline: float,
    check: Callable[[], str] | None = None,
    poll_s: float = 0.05,
) -> tuple[bytes, bytes, str]:
    """Read both pipes until EOF or exit; returns (stdout, stderr, why it was stopped: '', wall, output, or
    what `check` (called every `poll_s` while the program is quiet) returned when it returned a reason)."""
    assert proc.stdout is not None and proc.stderr is not None  # PIPE was asked for
    buffers: dict[IO[bytes], bytearray] = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    stopped = ""
    with selectors.DefaultSelector() as selector:
        for stream in buffers:
            selector.register(stream, selectors.EVENT_READ)
        while selector.get_map() and not stopped:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                stopped = "wall"
                break
            events = selector.select(min(remaining, poll_s))
            if check is not None and (stopped := check()):
                break
            if not events and exited(proc.pid):
                break  # the program is gone; a descendant may still hold the pipes open
            for key, _ in events:
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                buffer = buffers[key.fileobj]  # type: ignore[index]
                room = output_bytes - len(buffer)
                buffer += chunk[: max(room, 0)]
                if len(chunk) > room:
                    stopped = "output"
    while not stopped and not exited(proc.pid):  # pipes closed early: wait for the exit, up to the deadline
        if time.monotonic() >= deadline:
            stopped = "wall"
        elif check is not None:
            stopped = check()
        time.sleep(0.01)
    return bytes(buffers[proc.stdout]), bytes(buffers[proc.stderr]), stopped


def system_binds() -> list[str]:
    """bwrap arguments for this machine's system: /usr and /etc read-only, /bin, /sbin and /lib* as links or
    read-only binds, as they are here."""
    args = ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    return args


PRLIMIT = "prlimit"  # util-linux; without it limits are set in preexec_fn
PRLIMIT_FLAGS = {"CPU": "cpu", "AS": "as", "FSIZE": "fsize", "NPROC": "nproc", "NOFILE": "nofile", "CORE": "core"}


def prlimit_prefix(rlimits: Mapping[int, tuple[int, int]]) -> list[str] | None:
    """`prlimit --<limit>=soft:hard ... --`, to put before a command (limits set after the fork, so safe from
    a threaded service); None where util-linux's prlimit is missing."""
    prlimit = shutil.which(PRLIMIT, path=SAFE_PATH)
    if prlimit is None:
        return None
    names = {getattr(resource, f"RLIMIT_{k}"): v for k, v in PRLIMIT_FLAGS.items()}
    return [prlimit, *(f"--{names[r]}={soft}:{hard}" for r, (soft, hard) in rlimits.items()), "--"]


def exited(pid: int) -> bool:
    """Whether the child has exited, without reaping it (WNOWAIT)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the whole group may be gone already
        os.killpg(pgid, signal.SIGKILL)


def kill_uid(uid: int) -> None:
    """SIGKILL every process of the sandbox uid (kill(-1) run as that uid): escaped daemons included."""
    kill = shutil.which("kill", path=SAFE_PATH)
    if kill is None:
        log.warning("sandbox: no kill binary on %s; processes of uid %d that escaped are left", SAFE_PATH, uid)
        return
    try:
        subprocess.run(
            [kill, "-KILL", "-1"], env={}, user=uid, group=uid, extra_groups=[], capture_output=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError) as e:
        log.warning("sandbox: could not kill the leftover processes of uid %d: %s", uid, e)


SIGNAL_LIMITS: dict[int, str] = {signal.SIGXCPU: "cpu", signal.SIGXFSZ: "file-size", signal.SIGKILL: "killed"}


def limit_of(exit_code: int | None, stderr: str) -> str:
    """The limit a failed program most likely hit, from its signal or its last error (a heuristic)."""
    if not exit_code:
        return ""
    tail = stderr[-2000:]
    if "MemoryError" in tail:
        return "memory"
    if exit_code < 0:
        return SIGNAL_LIMITS.get(-exit_code, f"signal {-exit_code}")
    if "File too large" in tail:  # Python ignores SIGXFSZ, so the write fails with EFBIG
        return "file-size"
    if re.search(r"BlockingIOError.*Resource temporarily unavailable", tail):  # fork() under RLIMIT_NPROC
        return "processes"
    return ""


def sandbox_uid() -> int | None:
    """A fresh unprivileged uid when we are root (so RLIMIT_NPROC applies), else None (run as ourselves)."""
    if os.geteuid() != 0:
        return None
    for line in Path("/proc/self/uid_map").read_text().splitlines():
        inside, _, count = (int(x) for x in line.split())
        if inside <= UID_BASE and inside + count >= UID_BASE + UID_SPAN:
            return UID_BASE + secrets.randbelow(UID_SPAN)
    log.warning("sandbox: uids %d+ are not mapped here; programs run as root, without a process limit", UID_BASE)
    return None


def chown_tree(root: Path, uid: int) -> None:
    """Give `root` and everything under it (links themselves, not their targets) to `uid`."""
    for dirpath, dirnames, filenames in os.walk(root):
        os.chown(dirpath, uid, uid)
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), uid, uid, follow_symlinks=False)


def tasks_of(uid: int) -> int:
    """Tasks (threads) the uid runs now: RLIMIT_NPROC counts them all, not only the sandbox's."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            status = Path(entry.path, "status").read_text()
        except OSError:  # exited meanwhile, or not ours to read
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields.get("Uid", "-1 ").split()[0]) == uid:
            total += int(fields.get("Threads", "1"))
    return total
