"""Kubernetes objects of a run: plain dicts, dumped as one multi-document YAML file.

Per run: a ServiceAccount per role (raas, dataflow, trainer, eval; optional IAM role ARN annotation for IRSA), a
ConfigMap with every process's config (mounted at /etc/lakeflow), the dataflow process as a Deployment
(1 replica; its lease makes a second pod during a rollout wait), one Deployment per rollout pool (SIGTERM
drains: the group in progress is committed within terminationGracePeriodSeconds; liveness from the
service's heartbeat in the lake), each trainer as a Job running torchrun on one node, and each model's
evaluation (`eval:` in the run config) as a Job that ends once the last version is evaluated.
"""

from __future__ import annotations

import shlex
from typing import Any

from lakeflow.launch.render import ENDS, ROLES, Plan, Workload, dns_name, dump_all, grace_s

CONFIG_DIR = "/etc/lakeflow"
HEARTBEAT_MAX_AGE_S = 120  # a rollout service beats every heartbeat_s (5 s by default), also mid-group


def _labels(plan: Plan, w: Workload | None = None, role: str | None = None) -> dict[str, str]:
    labels = {"app.kubernetes.io/name": "lakeflow", "lakeflow/run": dns_name(plan.config.name)}
    if w is not None:
        labels["lakeflow/role"] = w.spec.role
        labels["lakeflow/process"] = dns_name(w.spec.name)
    elif role is not None:
        labels["lakeflow/role"] = role
    return labels


def _meta(plan: Plan, name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "namespace": plan.options.namespace, "labels": labels}


def service_account(plan: Plan, role: str) -> dict[str, Any]:
    meta = _meta(plan, dns_name(plan.config.name, role), _labels(plan, role=role))
    arn = plan.options.role_arns.get(role)
    if arn:
        meta["annotations"] = {"eks.amazonaws.com/role-arn": arn}
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}


def config_map(plan: Plan) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(plan, dns_name(plan.config.name, "config"), _labels(plan)),
        "data": dict(plan.files),
    }


def _heartbeat_probe(plan: Plan, period_s: int, failures: int) -> dict[str, Any]:
    """An exec probe: the pod's own heartbeat (stats/raas/<pod name>.json) is younger than the limit."""
    argv = ["python", "-m", "lakeflow.launch.probe", "--lake", plan.options.lake]
    if plan.options.endpoint_url:
        argv += ["--endpoint-url", plan.options.endpoint_url]
    argv += ["--max-age-s", str(HEARTBEAT_MAX_AGE_S)]
    script = f'exec {shlex.join(argv)} --raas-id "$POD_NAME"'
    return {
        "exec": {"command": ["sh", "-c", script]},
        "periodSeconds": period_s,
        "timeoutSeconds": 30,
        "failureThreshold": failures,
    }


def _container(plan: Plan, w: Workload) -> dict[str, Any]:
    command = plan.command(w)
    env: list[dict[str, Any]] = [{"name": "PYTHONUNBUFFERED", "value": "1"}]
    if w.spec.role == "raas":
        # the service's id is its pod's name: heartbeats, claims and samples name the pod
        env.append({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
        command += ["--id", "$(POD_NAME)"]
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "4Gi"}}
    if w.gpus:
        resources["limits"] = {"nvidia.com/gpu": w.gpus}
    container: dict[str, Any] = {
        "name": w.spec.verb,
        "image": plan.options.image,
        "command": command,  # the lakeflow process is PID 1, so SIGTERM reaches it
        "env": env,
        "resources": resources,
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}],
    }
    if w.spec.role == "raas":
        container["startupProbe"] = _heartbeat_probe(plan, 30, 40)  # model load and first pull: up to 20 min
        container["livenessProbe"] = _heartbeat_probe(plan, 60, 3)
    return container


def _pod(plan: Plan, w: Workload, restart: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": _labels(plan, w)},
        "spec": {
            "serviceAccountName": dns_name(plan.config.name, w.spec.role),
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": grace_s(w, plan.options),
            "containers": [_container(plan, w)],
            "volumes": [{"name": "config", "configMap": {"name": dns_name(plan.config.name, "config")}}],
        },
    }


def deployment(plan: Plan, w: Workload) -> dict[str, Any]:
    name = dns_name(plan.config.name, w.spec.name)
    selector = {"matchLabels": _labels(plan, w)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(plan, name, _labels(plan, w)),
        "spec": {"replicas": w.replicas, "selector": selector, "template": _pod(plan, w, "Always")},
    }


def job(plan: Plan, w: Workload) -> dict[str, Any]:
    """A trainer or an evaluation: both end, and a restarted one resumes (the trainer from the newest
    published version), so failures are retried."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(plan, dns_name(plan.config.name, w.spec.name), _labels(plan, w)),
        "spec": {"backoffLimit": 10, "completions": 1, "parallelism": 1, "template": _pod(plan, w, "OnFailure")},
    }


def objects(plan: Plan) -> list[dict[str, Any]]:
    out = [service_account(plan, role) for role in ROLES]
    out.append(config_map(plan))
    for w in plan.workloads:
        out.append(job(plan, w) if w.spec.role in ENDS else deployment(plan, w))
    return out


def render(plan: Plan) -> dict[str, str]:
    return {f"{dns_name(plan.config.name)}.yaml": dump_all(objects(plan))}


def apply_commands(out_dir: str, files: dict[str, str]) -> list[list[str]]:
    return [["kubectl", "apply", "-f", f"{out_dir}/{name}"] for name in sorted(files) if name.endswith(".yaml")]
