"""Command agents of the sandbox tests, honest and hostile, in one script run by the sandbox's own python3
(standard library only, and the `openai` client for `honest`): the task's prompt names the agent.

A hostile agent that finds its way out prints ESCAPED and returns a result (its episode would end `done`);
one that is refused says so on stderr and exits 1 (`agent_error`), or is stopped by the sandbox (disk, time).
"""

from __future__ import annotations

import glob
import json
import os
import socket
import sys
import time
import urllib.request

TASK = json.loads(os.environ["LAKEFLOW_TASK"])
ARGS = json.loads(TASK["answer"]) if TASK["answer"].startswith("{") else {}


def ask(content: str = "hi") -> str:
    """One chat completion through the gateway with urllib (no client to import)."""
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": 4}).encode()
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=body,
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]},
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        return str(json.load(reply)["choices"][0]["message"]["content"])


def refused(why: str) -> None:
    ask()  # the gateway answers while everything else is refused
    sys.exit(f"refused: {why}")


def escaped(what: str) -> None:
    print(json.dumps({"answer": f"ESCAPED: {what}"}))
    sys.exit(0)


def honest() -> None:
    """The OpenAI client through the relayed gateway; edits its workspace: one file added, one changed, one deleted."""
    from openai import OpenAI

    client = OpenAI(max_retries=0)
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": TASK["prompt"]}])
    with open("/workspace/notes.txt", "w") as f:
        f.write(reply.choices[0].message.content or "")
    with open("/workspace/a.txt", "a") as f:
        f.write("edited\n")
    os.remove("/workspace/gone.txt")
    print(json.dumps({"answer": "7"}))


def plain() -> None:
    """Asks once and answers: an honest episode beside the hostile ones."""
    ask()
    print(json.dumps({"answer": "7"}))


def forked() -> None:
    """Reads the notes an earlier episode left (a fork of its stored state) and answers with them."""
    ask()
    with open("/workspace/notes.txt") as f:
        print(json.dumps({"answer": f.read().strip()[-1:]}))


def fork_bomb() -> None:
    kids = 0
    while True:  # every child sleeps, the parent forks again; refused forks are retried until stopped
        try:
            if os.fork() == 0:
                time.sleep(600)
                os._exit(0)
            kids += 1
            print(f"forked {kids}", file=sys.stderr, flush=True)
        except OSError:
            time.sleep(0.05)


def fill_disk() -> None:
    chunk = b"\1" * (1 << 20)
    n = 0
    while True:  # ENOSPC (or EFBIG) is retried in a new file: only the sandbox ends this
        try:
            with open(f"/workspace/fill-{n}", "wb") as f:
                while True:
                    f.write(chunk)
        except OSError:
            n += 1
            time.sleep(0.01)


def write_outside() -> None:
    outside = [f"{d}/probe" for d in ARGS["host_dirs"]]  # directories of the host (one writable by anyone)
    outside += ["/etc/lakeflow-probe", "/usr/lakeflow-probe", "/lakeflow-probe", "/proc/lakeflow-probe"]
    for path in outside:
        try:
            with open(path, "w") as f:
                f.write("x")
        except OSError:
            continue
        escaped(path)
    refused("every write outside /workspace, /tmp and the home directory failed")


def snoop() -> None:
    """Gathers what it can read that is not its own into its workspace (stored with its change)."""
    found = [f"own: {json.dumps(dict(os.environ))}"]
    for path in glob.glob("/proc/*/environ") + glob.glob("/proc/*/cmdline") + ARGS["host_paths"]:
        try:
            with open(path, "rb") as f:
                found.append(f"{path}: {f.read()!r}")
        except OSError as e:
            found.append(f"{path}: {e}")
    for path in ARGS["host_paths"]:
        found.append(f"ls {path}: {os.path.exists(path)}")
    with open("/workspace/loot.txt", "w") as f:
        f.write("\n".join(found))
    refused("gathered what it could read into loot.txt")


def reach_out() -> None:
    targets = [("127.0.0.1", int(ARGS["bucket_port"])), ("1.1.1.1", 443), ("8.8.8.8", 53), (ARGS["host_ip"], 22)]
    for host, port in targets:
        try:
            socket.create_connection((host, port), timeout=2).close()
        except OSError:
            continue
        escaped(f"{host}:{port}")
    try:
        socket.getaddrinfo("example.com", 443)
    except OSError:
        refused("no address but the gateway answers")
    escaped("DNS")


def sleeper() -> None:
    time.sleep(600)


AGENTS = {
    f.__name__: f for f in (honest, plain, forked, fork_bomb, fill_disk, write_outside, snoop, reach_out, sleeper)
}

if __name__ == "__main__":
    AGENTS[TASK["prompt"]]()
