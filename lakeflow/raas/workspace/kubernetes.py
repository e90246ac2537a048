"""The kubernetes backend: one pod per episode and the NetworkPolicy that fences it, as plain dicts in the
shape `lakeflow launch` renders (labels `app.kubernetes.io/name: lakeflow`, `lakeflow/run`, `lakeflow/role`),
validated offline by the tests (kubernetes-validate, strict). The rollout service does not create these
pods yet (`lakeflow workspace pod` prints them): see docs/sandbox.md.

The pod runs the pool's image as a non-root user with every capability dropped, no privilege escalation, a
read-only root, no service-account token and no service links (no cluster addresses in its
environment), CPU, memory and ephemeral-storage limits, `activeDeadlineSeconds`, and its workspace,
/tmp and home on size-limited emptyDirs; with `workspace` an absolute path, an init container copies
that directory of the image into the workspace. The policy denies all ingress and allows egress only
to the gateway: the rollout service's pods on the gateway's port (and `network.allow` addresses).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from lakeflow.errors import ConfigError
from lakeflow.raas.config.sandbox import SandboxConfig
from lakeflow.raas.workspace.bwrap import HOME, INNER
from lakeflow.raas.workspace.routes import is_ip

POD_USER = 65532  # the conventional "nonroot" user of distroless images
_DNS = re.compile(r"[^a-z0-9-]+")


def dns_name(*parts: str) -> str:
    """A DNS-1123 label from `parts` (lowercase, '-', at most 63 characters)."""
    name = _DNS.sub("-", "-".join(parts).lower()).strip("-")
    return name[:63].rstrip("-") or "episode"


def _labels(run: str, episode: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "lakeflow",
        "lakeflow/run": dns_name(run),
        "lakeflow/role": "agent-episode",
        "lakeflow/episode": dns_name(episode),
    }


def episode_pod(
    config: SandboxConfig, *, run: str, episode: str, namespace: str, command: list[str], env: Mapping[str, str]
) -> dict[str, Any]:
    """The pod of one episode (its command with the episode's clean environment)."""
    if config.image is None:
        raise ConfigError("sandbox: the kubernetes backend needs an `image`")
    if config.workspace is not None and not config.workspace.startswith("/"):
        raise ConfigError(
            f"sandbox.workspace {config.workspace!r}: a pod's workspace is a directory of its image (an absolute "
            "path); archives and lake:// states are not fetched into pods (docs/sandbox.md)"
        )
    seconds = config.seconds or 3600.0  # the caller passes the pool's (`command_seconds`)
    volumes = [
        {"name": "workspace", "emptyDir": {"sizeLimit": f"{config.disk_mb}Mi"}},
        {"name": "tmp", "emptyDir": {"sizeLimit": f"{config.tmp_mb}Mi"}},
        {"name": "home", "emptyDir": {"sizeLimit": f"{config.tmp_mb}Mi"}},
    ]
    mounts = [{"name": "workspace", "mountPath": INNER}, {"name": "tmp", "mountPath": "/tmp"}]
    mounts.append({"name": "home", "mountPath": HOME})
    container = _container(config, "agent", command, mounts)
    container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    container["workingDir"] = INNER
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": max(1, math.ceil(seconds)),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 0,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": POD_USER,
            "runAsGroup": POD_USER,
            "fsGroup": POD_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": volumes,
    }
    if config.workspace is not None:
        copy = ["sh", "-c", f'cp -a "{config.workspace}/." {INNER}/']
        spec["initContainers"] = [_container(config, "workspace", copy, mounts[:1])]
    meta = {"name": dns_name(run, episode), "namespace": namespace, "labels": _labels(run, episode)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _container(config: SandboxConfig, name: str, command: list[str], mounts: list[dict[str, Any]]) -> dict[str, Any]:
    limits = {
        "cpu": f"{config.cpu:g}",
        "memory": f"{config.memory_mb}Mi",
        "ephemeral-storage": f"{config.disk_mb + 2 * config.tmp_mb}Mi",
    }
    return {
        "name": name,
        "image": config.image,
        "command": command,
        "resources": {"requests": dict(limits), "limits": limits},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": mounts,
    }


def network_policy(
    config: SandboxConfig, *, run: str, episode: str, namespace: str, gateway_url: str
) -> dict[str, Any]:
    """The episode pod's NetworkPolicy: no ingress; egress to the gateway (the run's rollout service pods on
    its port), to `network.allow` addresses, and to the cluster's DNS when the gateway has a host name."""
    egress: list[dict[str, Any]] = []
    if config.network != "none":
        url = urlsplit(gateway_url)
        port = url.port or (443 if url.scheme == "https" else 80)
        gateway = {"podSelector": {"matchLabels": {"lakeflow/run": dns_name(run), "lakeflow/role": "raas"}}}
        egress.append({"to": [gateway], "ports": [{"protocol": "TCP", "port": port}]})
        if url.hostname is not None and not is_ip(url.hostname):
            dns = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}
            dns["podSelector"] = {"matchLabels": {"k8s-app": "kube-dns"}}
            egress.append({"to": [dns], "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]})
    for entry in config.allowed:
        host, number = entry.rsplit(":", 1)
        if not is_ip(host):
            raise ConfigError(f"sandbox.network.allow {entry!r}: a NetworkPolicy allows addresses, not names")
        block = {"ipBlock": {"cidr": f"{host}/32"}}
        egress.append({"to": [block], "ports": [{"protocol": "TCP", "port": int(number)}]})
    selector = {"matchLabels": {"lakeflow/episode": dns_name(episode)}}
    spec = {"podSelector": selector, "policyTypes": ["Ingress", "Egress"], "ingress": [], "egress": egress}
    meta = {"name": dns_name(run, episode), "namespace": namespace, "labels": _labels(run, episode)}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta, "spec": spec}
