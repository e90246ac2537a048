"""A one-node Slurm cluster for tests: munged, slurmctld and slurmd started in a temporary folder.

Debian's `slurm-wlm` and `munge` packages, configured here without systemd or cgroups (the recipe that
works on a container): munged runs as the munge user on its own socket, the Slurm daemons as root with
their state, spool, logs and pid files under the folder, on free loopback ports. The node declares more
CPUs than the machine has (config_overrides) so a run's long-lived services and its trainer fit at once.
Every daemon is stopped by its pid file.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel")
NODE_CPUS = 8


def missing() -> str | None:
    """Why a cluster cannot start here (None: it can)."""
    absent = [b for b in BINARIES if shutil.which(b) is None and not Path(f"/usr/sbin/{b}").exists()]
    if absent:
        return f"Slurm or munge is not installed ({', '.join(absent)}): apt-get install -y slurm-wlm munge"
    if os.geteuid() != 0:
        return "the Slurm daemons need root (slurmd starts jobs as their user)"
    if not Path("/etc/munge/munge.key").exists():
        return "no /etc/munge/munge.key (the munge package creates it)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(what: str, ready: callable, timeout_s: float = 60.0) -> None:  # type: ignore[valid-type]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not come up within {timeout_s:.0f} s")


def _stop(pid_file: Path) -> None:
    if not pid_file.exists():
        return
    try:
        pid = int(pid_file.read_text().split()[0])
    except (ValueError, IndexError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


def _conf(root: Path, host: str, munge_socket: Path) -> str:
    ctld, slurmd = _free_port(), _free_port()
    return "\n".join(
        [
            "ClusterName=lakeflowtest",
            f"SlurmctldHost={host}",
            "SlurmUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={munge_socket}",
            f"SlurmctldPort={ctld}",
            f"SlurmdPort={slurmd}",
            "MpiDefault=none",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            "MailProg=/bin/true",
            f"StateSaveLocation={root}/state",
            f"SlurmdSpoolDir={root}/spool",
            f"SlurmctldPidFile={root}/slurmctld.pid",
            f"SlurmdPidFile={root}/slurmd.pid",
            f"SlurmctldLogFile={root}/slurmctld.log",
            f"SlurmdLogFile={root}/slurmd.log",
            f"NodeName={host} CPUs={NODE_CPUS} RealMemory=16000 State=UNKNOWN",
            f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


@contextmanager
def slurm_cluster(root: Path) -> Iterator[dict[str, str]]:
    """Start the daemons under `root`; yields the environment (SLURM_CONF, PATH) for Slurm's commands."""
    root.mkdir(parents=True, exist_ok=True)
    for sub in ("state", "spool"):
        (root / sub).mkdir(exist_ok=True)
    # munged runs as the munge user, which must reach its folder: not under pytest's private tmp folders
    munge_dir = Path(tempfile.mkdtemp(prefix="lakeflow-munge-"))
    os.chmod(munge_dir, 0o755)
    shutil.chown(munge_dir, "munge", "munge")
    sock = munge_dir / "munge.socket.2"
    host = socket.gethostname().split(".")[0]
    conf = root / "slurm.conf"
    conf.write_text(_conf(root, host, sock))
    env = {**os.environ, "SLURM_CONF": str(conf), "PATH": f"/usr/sbin:{os.environ.get('PATH', '')}"}
    pid_files = [munge_dir / "munged.pid", root / "slurmd.pid", root / "slurmctld.pid"]
    try:
        subprocess.run(
            [
                "runuser",
                "-u",
                "munge",
                "--",
                "/usr/sbin/munged",
                f"--socket={sock}",
                f"--pid-file={munge_dir}/munged.pid",
                f"--log-file={munge_dir}/munged.log",
                f"--seed-file={munge_dir}/munged.seed",
            ],
            check=True,
            capture_output=True,
            timeout=30,
        )
        _wait("munged", sock.exists)
        subprocess.run(["/usr/sbin/slurmctld", "-f", str(conf)], env=env, check=True, capture_output=True, timeout=30)
        subprocess.run(["/usr/sbin/slurmd", "-f", str(conf)], env=env, check=True, capture_output=True, timeout=30)

        def node_idle() -> bool:
            done = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True)
            return done.returncode == 0 and done.stdout.strip() in ("idle", "mix", "alloc")

        _wait("the Slurm node", node_idle)
        yield env
    finally:
        for pid_file in pid_files:
            _stop(pid_file)
        shutil.rmtree(munge_dir, ignore_errors=True)
