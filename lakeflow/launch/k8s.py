"""Kubernetes objects of a run: plain dicts, dumped as one multi-document YAML file.

Per run: a ServiceAccount per role (raas, dataflow, trainer, eval; an IRSA or Workload Identity annotation
per role), a ConfigMap with every process's config (mounted at /etc/lakeflow), the dataflow process as a
Deployment (1 replica; its lease makes a second pod during a rollout wait), one Deployment per rollout
pool (SIGTERM drains: the group in progress is committed within terminationGracePeriodSeconds; liveness
from the service's heartbeat in the lake), each trainer as a Job running torchrun on one node or a JobSet
of one pod per node, and each model's evaluation (`eval:` in the run config) as a Job that ends once the
last version is evaluated, and each served model of `serve:` as a Deployment behind a ClusterIP Service
(`launch.served`). Resources, node selectors, tolerations, /dev/shm, the HF token and model
cache and per-role credential Secrets come from the run config's `launch:` section.
"""

from __future__ import annotations

import shlex
from typing import Any

from lakeflow.launch import served
from lakeflow.launch.checks import GPU_PRODUCT_LABEL, GPU_TYPES
from lakeflow.launch.render import ENDS, ROLES, dump_all, grace_s
from lakeflow.launch.workloads import Plan, Workload, dns_name
from lakeflow.run.cluster import time_seconds

CONFIG_DIR = "/etc/lakeflow"
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
NODE_JOB = "node"  # the JobSet's one replicated Job: a pod per trainer node
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
    kind, identities = plan.credentials()
    annotation = {"irsa": "eks.amazonaws.com/role-arn", "workload_identity": "iam.gke.io/gcp-service-account"}
    if kind in annotation and identities.get(role):
        meta["annotations"] = {annotation[kind]: identities[role]}
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


def _env(plan: Plan, w: Workload) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [{"name": "PYTHONUNBUFFERED", "value": "1"}]
    if plan.options.endpoint_url:  # datasets and weights URLs on the same S3-compatible store
        env.append({"name": "AWS_ENDPOINT_URL", "value": plan.options.endpoint_url})
    if w.spec.role == "raas":
        # the service's id is its pod's name: heartbeats, claims and samples name the pod
        env.append({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    if w.spec.role == "trainer" and w.nodes > 1:  # the node's index in the Indexed Job: torchrun's node rank
        index = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        env.append({"name": "NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": index}}})
    secret = plan.config.launch.hf_token_secret
    if secret and plan.reads_hub(w):
        ref = {"secretKeyRef": {"name": secret, "key": "token"}}
        env.append({"name": "HF_TOKEN", "valueFrom": ref})
    if plan.config.launch.model_cache is not None:
        env.append({"name": "HF_HOME", "value": plan.config.launch.model_cache.path})
    return env


def _resources(w: Workload) -> dict[str, Any]:
    """Requests = limits for memory and GPUs (a pod over its memory is killed, not slowed); CPU is requested."""
    r = w.resources
    requests: dict[str, Any] = {"cpu": f"{r.cpus:g}"}
    limits: dict[str, Any] = {}
    if r.memory:
        requests["memory"] = limits["memory"] = r.memory
    if w.gpus:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = w.gpus
    return {"requests": requests, "limits": limits} if limits else {"requests": requests}


def _container(plan: Plan, w: Workload) -> dict[str, Any]:
    command = plan.command(w, rendezvous(plan, w))
    if w.spec.role == "raas":
        command += ["--id", "$(POD_NAME)"]
    mounts: list[dict[str, Any]] = [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}]
    if w.resources.shm:
        mounts.append({"name": "shm", "mountPath": "/dev/shm"})
    cache = plan.config.launch.model_cache
    if cache is not None and cache.claim:
        mounts.append({"name": "model-cache", "mountPath": cache.path})
    container: dict[str, Any] = {
        "name": w.spec.verb,
        "image": plan.image,
        "command": command,  # the lakeflow process is PID 1, so SIGTERM reaches it
        "env": _env(plan, w),
        "resources": _resources(w),
        "volumeMounts": mounts,
    }
    kind, identities = plan.credentials()
    if kind == "secret" and identities.get(w.spec.role):  # AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
        container["envFrom"] = [{"secretRef": {"name": identities[w.spec.role]}}]
    if w.spec.role == "trainer" and w.nodes > 1:
        container["ports"] = [{"name": "rendezvous", "containerPort": plan.config.launch.rdzv_port}]
    if w.spec.role == "raas":
        container["startupProbe"] = _heartbeat_probe(plan, 30, 40)  # model load and first pull: up to 20 min
        container["livenessProbe"] = _heartbeat_probe(plan, 60, 3)
    if w.spec.role == "serve":  # it listens once the model is loaded; /v1/models answers without the engine
        container["ports"] = [{"name": "http", "containerPort": plan.config.launch.serve_port}]
        container["startupProbe"] = _http_probe(30, 40)  # a download and load: up to 20 min
        container["readinessProbe"] = _http_probe(10, 3)  # the Service sends requests to a ready pod only
        container["livenessProbe"] = _http_probe(60, 3)
    return container


def _http_probe(period_s: int, failures: int) -> dict[str, Any]:
    get = {"path": "/v1/models", "port": "http"}
    return {"httpGet": get, "periodSeconds": period_s, "timeoutSeconds": 10, "failureThreshold": failures}


def _pod(plan: Plan, w: Workload, restart: str) -> dict[str, Any]:
    volumes: list[dict[str, Any]] = [{"name": "config", "configMap": {"name": dns_name(plan.config.name, "config")}}]
    if w.resources.shm:
        volumes.append({"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": w.resources.shm}})
    cache = plan.config.launch.model_cache
    if cache is not None and cache.claim:
        volumes.append({"name": "model-cache", "persistentVolumeClaim": {"claimName": cache.claim}})
    spec: dict[str, Any] = {
        "serviceAccountName": dns_name(plan.config.name, w.spec.role),
        "restartPolicy": restart,
        "terminationGracePeriodSeconds": grace_s(w, plan.options),
        "containers": [_container(plan, w)],
        "volumes": volumes,
    }
    if w.spec.role == "serve":  # a served model reads no lake: the namespace's default account, no token
        spec.pop("serviceAccountName")
        spec["automountServiceAccountToken"] = False
    selector = dict(w.resources.node_selector or {})
    if w.gpus and w.resources.gpu_type in GPU_TYPES:
        selector.setdefault(GPU_PRODUCT_LABEL, GPU_TYPES[w.resources.gpu_type])
    if selector:
        spec["nodeSelector"] = selector
    if w.resources.tolerations:
        spec["tolerations"] = [t.model_dump(exclude_none=True) for t in w.resources.tolerations]
    return {"metadata": {"labels": _labels(plan, w)}, "spec": spec}


def rendezvous(plan: Plan, w: Workload) -> tuple[str, ...]:
    """torchrun's flags on a multi-node trainer: node 0 of the JobSet (its stable DNS name) is the master."""
    if w.spec.role != "trainer" or w.nodes <= 1:
        return ()
    name = dns_name(plan.config.name, w.spec.name)
    master = f"{name}-{NODE_JOB}-0-0.{name}"  # <jobset>-<replicated job>-<job index>-<pod index>.<subdomain>
    return (
        f"--nnodes={w.nodes}",
        "--node_rank=$(NODE_RANK)",
        f"--master_addr={master}",
        f"--master_port={plan.config.launch.rdzv_port}",
    )


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
    spec: dict[str, Any] = {
        "backoffLimit": 10,
        "completions": 1,
        "parallelism": 1,
        "template": _pod(plan, w, "OnFailure"),
    }
    if w.resources.time:
        spec["activeDeadlineSeconds"] = time_seconds(w.resources.time)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(plan, dns_name(plan.config.name, w.spec.name), _labels(plan, w)),
        "spec": spec,
    }


def job_set(plan: Plan, w: Workload) -> dict[str, Any]:
    """A trainer over several nodes: a JobSet of one Indexed Job with a pod per node. JobSet gives each pod
    a stable DNS name (node 0 is torchrun's master) and restarts the whole set when one pod fails (a torchrun
    job cannot lose a node); every start resumes from the newest published version."""
    pod = _pod(plan, w, "Never")
    child: dict[str, Any] = {
        "parallelism": w.nodes,
        "completions": w.nodes,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "template": pod,
    }
    if w.resources.time:
        child["activeDeadlineSeconds"] = time_seconds(w.resources.time)
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": _meta(plan, dns_name(plan.config.name, w.spec.name), _labels(plan, w)),
        "spec": {
            "failurePolicy": {"maxRestarts": 10},
            "network": {"enableDNSHostnames": True},
            "replicatedJobs": [{"name": NODE_JOB, "replicas": 1, "template": {"spec": child}}],
        },
    }


def objects(plan: Plan) -> list[dict[str, Any]]:
    out = [service_account(plan, role) for role in ROLES]
    out.append(config_map(plan))
    for w in plan.workloads:
        if w.spec.role == "trainer" and w.nodes > 1:
            out.append(job_set(plan, w))
        else:
            out.append(job(plan, w) if w.spec.role in ENDS else deployment(plan, w))
    for w in plan.served:
        out += [deployment(plan, w), service(plan, w)]
    return out


def service(plan: Plan, w: Workload) -> dict[str, Any]:
    """A served model's stable address (ClusterIP): the pools' judges and teachers name it (launch.served)."""
    name = served.service_name(plan.config.name, w.spec.config["id"])
    port = {"name": "http", "port": plan.config.launch.serve_port, "targetPort": "http", "protocol": "TCP"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(plan, name, _labels(plan, w)),
        "spec": {"type": "ClusterIP", "selector": _labels(plan, w), "ports": [port]},
    }


def render(plan: Plan) -> dict[str, str]:
    return {f"{dns_name(plan.config.name)}.yaml": dump_all(objects(plan))}


def apply_commands(out_dir: str, files: dict[str, str]) -> list[list[str]]:
    return [["kubectl", "apply", "-f", f"{out_dir}/{name}"] for name in sorted(files) if name.endswith(".yaml")]
