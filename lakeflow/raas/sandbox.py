"""A sandbox for untrusted Python (model-written programs): limits, isolation, capped output.

`run_python(source)` runs the program in a throw-away directory under CPU, memory, file-size,
process-count and wall-clock limits, with an empty environment and capped output, and never
raises on a bad program. Two modes, chosen automatically (`mode="auto"`) or forced:

- `bwrap` (bubblewrap 0.8+, needs user namespaces): new user/pid/net/ipc/uts namespaces (no
  network, only its own processes), a root made of read-only `/usr`, `/etc` and the interpreter,
  the work directory at `/sandbox`, small tmpfs `/tmp` and `/dev/shm`, nothing else of the host.
- `rlimit` (fallback): a plain subprocess in a new session with the same limits and empty
  environment, cwd in the work directory. It does NOT isolate the network, nor the file system:
  the program can read and write every file its user may (outside the work directory too).
  Run as non-root it also runs as the caller's user, so it can read `/proc/<caller>/environ`
  (the caller's credentials) and a child that calls setsid() escapes the final kill.

Run as root, both modes switch to a fresh unprivileged uid per run (so RLIMIT_NPROC, which
root ignores, applies; files of root are out of reach; every leftover process of that uid is
killed afterwards). Limits are set by `prlimit` (util-linux) after the fork, so the sandbox is
safe to use from a threaded service (`preexec_fn` is used only when prlimit is missing).
"""

from __future__ import annotations

import functools
import logging
import os
import resource
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from lakeflow.errors import InputError
from lakeflow.raas.sandbox_processes import (
    SAFE_PATH,
    chown_tree,
    collect_output,
    kill_group,
    kill_uid,
    limit_of,
    prlimit_prefix,
    sandbox_uid,
    system_binds,
    tasks_of,
)

log = logging.getLogger(__name__)

Mode = Literal["auto", "bwrap", "rlimit"]
MODES = ("auto", "bwrap", "rlimit")
INNER_DIR = "/sandbox"  # the work directory as the program sees it under bwrap
_MIB = 1 << 20


@dataclass(frozen=True)
class Limits:
    """Resource limits of one run. CPU, memory, file size and processes are rlimits of the program."""

    wall_s: float = 10.0  # wall clock of the whole run; then the process group (or pid namespace) is killed
    cpu_s: int = 5  # RLIMIT_CPU seconds (SIGXCPU at the limit, SIGKILL one second later)
    memory_mb: int = 512  # RLIMIT_AS: address space, so Python raises MemoryError
    file_mb: int = 16  # RLIMIT_FSIZE: largest file the program may write
    processes: int = 32  # RLIMIT_NPROC: tasks of the sandbox uid (bwrap's own two count too)
    open_files: int = 64  # RLIMIT_NOFILE
    output_bytes: int = _MIB  # per stream; more output stops the program (limit "output")
    tmp_mb: int = 64  # size of each tmpfs (/tmp, /dev/shm) under bwrap

    def validate(self) -> None:
        for name, value in vars(self).items():
            if not value > 0:
                raise InputError(f"sandbox limit {name} must be positive, got {value!r}")


@dataclass(frozen=True)
class SandboxResult:
    """What a run did. `exit_code` < 0 is the signal that ended it; None when the sandbox stopped it."""

    exit_code: int | None
    stdout: str  # decoded UTF-8 (invalid bytes replaced), at most `output_bytes`
    stderr: str
    truncated: bool  # a stream hit `output_bytes`
    timed_out: bool  # the wall clock ran out
    limit: str  # which limit ended it: '', wall, cpu, memory, file-size, processes, output, killed, signal N
    wall_s: float
    mode: str  # bwrap or rlimit

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.limit


def run_python(
    source: str,
    *,
    stdin: str | bytes = b"",
    files: Mapping[str, str | bytes] | None = None,
    args: Sequence[str] = (),
    limits: Limits | None = None,
    mode: Mode = "auto",
    python: str | None = None,
) -> SandboxResult:
    """Run `source` as `main.py` (cwd: the work directory, holding `files` too) in the sandbox.

    `python` is the interpreter (default: python3 on /usr/local/bin:/usr/bin:/bin, not the
    caller's venv). Raises ValueError only on misuse: bad limits or file names, an unknown
    mode, `mode="bwrap"` where bubblewrap cannot run, an interpreter that cannot be used.
    """
    limits = limits or Limits()
    limits.validate()
    if mode not in MODES:
        raise InputError(f"sandbox mode must be one of {', '.join(MODES)}, got {mode!r}")
    if not isinstance(source, str):
        raise ValueError(f"source must be a str of Python code, got {type(source).__name__}")
    extra = {_check_name(name): _bytes(data) for name, data in (files or {}).items()}
    if "main.py" in extra:
        raise ValueError("files may not contain 'main.py': that name holds the program")
    interpreter = _interpreter(python)
    chosen = _choose(mode)
    uid = sandbox_uid()
    if uid is not None and not _world_executable(interpreter):
        raise InputError(
            f"interpreter {interpreter} is not executable by other users, and the sandbox runs the program "
            f"as an unprivileged uid: pass python='/usr/bin/python3' (or install Python outside a private home)"
        )
    work = Path(tempfile.mkdtemp(prefix="lakeflow-sandbox-"))
    try:
        for name, data in {**extra, "main.py": _bytes(source)}.items():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            (work / name).write_bytes(data)
        if uid is not None:
            chown_tree(work, uid)
        inner = INNER_DIR if chosen == "bwrap" else str(work)
        program = [interpreter, "-I", "-B", f"{inner}/main.py", *args]
        env = {"PATH": SAFE_PATH, "LANG": "C.UTF-8", "HOME": inner, "TMPDIR": "/tmp" if chosen == "bwrap" else inner}
        command = [*_bwrap_command(work, interpreter, env, limits), *program] if chosen == "bwrap" else program
        return _execute(command, work, env, limits, uid, chosen, _bytes(stdin))
    finally:
        if uid is not None:
            kill_uid(uid)
        _remove(work)


def bwrap_status() -> tuple[bool, str]:
    """Whether bubblewrap can create the sandbox here, and why not (its error) when it cannot."""
    return _probe_bwrap()


def detect_mode() -> Literal["bwrap", "rlimit"]:
    """The mode `mode="auto"` picks: bwrap where it works, else rlimit (logged once, with the reason)."""
    return _choose("auto")


def _choose(mode: Mode) -> Literal["bwrap", "rlimit"]:
    if mode == "rlimit":
        return "rlimit"
    ok, why = _probe_bwrap()
    if mode == "bwrap" and not ok:
        raise InputError(
            f"sandbox mode 'bwrap' was asked for but bubblewrap cannot run here ({why}); "
            "install it (apt-get install -y bubblewrap) where user namespaces are allowed, or use mode='auto'"
        )
    _log_choice(ok, why)
    return "bwrap" if ok else "rlimit"


@functools.cache
def _log_choice(ok: bool, why: str) -> None:
    if ok:
        log.info("sandbox: using bubblewrap (no network, read-only system, private /tmp)")
    else:
        log.warning(
            "sandbox: bubblewrap unavailable (%s); falling back to an rlimit-only subprocess, "
            "which does not isolate the network or files outside its work directory",
            why,
        )


@functools.cache
def _probe_bwrap() -> tuple[bool, str]:
    binary = shutil.which("bwrap", path=SAFE_PATH)
    true = shutil.which("true", path=SAFE_PATH)
    if binary is None or true is None:
        return False, "bwrap is not installed"
    uid = sandbox_uid()
    work = Path(tempfile.mkdtemp(prefix="lakeflow-sandbox-probe-"))
    try:
        if uid is not None:
            chown_tree(work, uid)
        cmd = [*_bwrap_command(work, true, {"PATH": SAFE_PATH}, Limits()), true]
        ids = {"user": uid, "group": uid, "extra_groups": []} if uid is not None else {}
        done = subprocess.run(cmd, env={}, capture_output=True, timeout=30, check=False, **ids)  # type: ignore[call-overload]
    except (OSError, subprocess.SubprocessError) as e:
        return False, f"{type(e).__name__}: {e}"
    finally:
        _remove(work)
    if done.returncode != 0:
        return False, done.stderr.decode(errors="replace").strip()[:300] or f"exit code {done.returncode}"
    return True, ""


def _bwrap_command(work: Path, interpreter: str, env: Mapping[str, str], limits: Limits) -> list[str]:
    binary = shutil.which("bwrap", path=SAFE_PATH) or "bwrap"
    cmd = [binary, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session"]
    cmd += ["--clearenv"] + [a for key, value in env.items() for a in ("--setenv", key, value)]
    cmd += system_binds()
    prefix = Path(interpreter).parent.parent  # <prefix>/bin/python3 -> <prefix>
    if not any(prefix.is_relative_to(p) for p in ("/usr", "/bin", "/lib", "/lib64")):
        cmd += ["--ro-bind", str(prefix), str(prefix)]
    tmp = str(limits.tmp_mb * _MIB)
    cmd += ["--proc", "/proc", "--dev", "/dev", "--size", tmp, "--tmpfs", "/tmp", "--size", tmp, "--tmpfs", "/dev/shm"]
    cmd += ["--bind", str(work), INNER_DIR, "--chdir", INNER_DIR, "--remount-ro", "/", "--"]
    return cmd


def _execute(
    command: list[str], work: Path, env: dict[str, str], limits: Limits, uid: int | None, mode: str, stdin: bytes
) -> SandboxResult:
    nproc = limits.processes if uid is not None else limits.processes + tasks_of(os.getuid())
    rlimits = {
        resource.RLIMIT_CPU: (limits.cpu_s, limits.cpu_s + 1),
        resource.RLIMIT_AS: (limits.memory_mb * _MIB,) * 2,
        resource.RLIMIT_FSIZE: (limits.file_mb * _MIB,) * 2,
        resource.RLIMIT_NPROC: (nproc, nproc),
        resource.RLIMIT_NOFILE: (limits.open_files,) * 2,
        resource.RLIMIT_CORE: (0, 0),
    }
    prefix = prlimit_prefix(rlimits)
    preexec: Callable[[], None] | None = None
    if prefix is not None:
        command = [*prefix, *command]
    else:  # not thread-safe in theory (Python code between fork and exec), hence prlimit first

        def preexec() -> None:
            for r, pair in rlimits.items():
                resource.setrlimit(r, pair)

    ids = {"user": uid, "group": uid, "extra_groups": []} if uid is not None else {}
    start = time.monotonic()
    with tempfile.TemporaryFile() as stdin_file:
        stdin_file.write(stdin)
        stdin_file.seek(0)
        with subprocess.Popen(  # type: ignore[call-overload]
            command,
            stdin=stdin_file,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=str(work),
            env=env,
            start_new_session=True,
            preexec_fn=preexec,
            **ids,
        ) as proc:
            out, err, stopped = collect_output(proc, limits.output_bytes, start + limits.wall_s)
            kill_group(proc.pid)  # the leader is not reaped yet, so its group id cannot have been reused
            code: int = proc.wait()
    wall = time.monotonic() - start
    exit_code: int | None = None if stopped else code
    if exit_code is not None and mode == "bwrap" and 128 < exit_code < 128 + signal.NSIG:
        exit_code = 128 - exit_code  # bwrap reports a signal as 128 + n: make it -n as subprocess does
    stderr = err.decode(errors="replace")
    return SandboxResult(
        exit_code=exit_code,
        stdout=out.decode(errors="replace"),
        stderr=stderr,
        truncated=stopped == "output",
        timed_out=stopped == "wall",
        limit=stopped or limit_of(exit_code, stderr),
        wall_s=wall,
        mode=mode,
    )


def _interpreter(python: str | None) -> str:
    found = shutil.which(python or "python3", path=SAFE_PATH if python is None else None)
    if found is None:
        where = f"on {SAFE_PATH}" if python is None else "(not an executable file)"
        raise InputError(f"no Python interpreter {python or 'python3'} {where}: pass python='/path/to/python3'")
    return os.path.realpath(found)


def _world_executable(path: str) -> bool:
    p = Path(path)
    dirs_ok = all(os.stat(d).st_mode & stat.S_IXOTH for d in p.parents)
    mode = os.stat(p).st_mode
    return dirs_ok and bool(mode & stat.S_IXOTH) and bool(mode & stat.S_IROTH)


def _check_name(name: str) -> str:
    parts = PurePosixPath(name).parts
    if not parts or PurePosixPath(name).is_absolute() or ".." in parts or "\x00" in name:
        raise ValueError(f"sandbox file name {name!r} must be a relative path inside the work directory")
    return str(PurePosixPath(*parts))


def _bytes(data: str | bytes) -> bytes:
    return data.encode(errors="replace") if isinstance(data, str) else data  # lone surrogates become '?'


def _remove(work: Path) -> None:
    if os.geteuid() != 0:  # the program may have made its directories unreadable to us (root ignores modes)
        os.chmod(work, 0o700)
        for dirpath, dirnames, _ in os.walk(work):
            for name in dirnames:
                path = os.path.join(dirpath, name)
                if not os.path.islink(path):
                    os.chmod(path, 0o700)
    shutil.rmtree(work, ignore_errors=True)
    if work.exists():
        log.warning("sandbox: could not remove the work directory %s", work)
