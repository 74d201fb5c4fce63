"""Kubernetes manifests for a paddlerun job: an Indexed Job whose pods run one launcher each, a
headless Service that gives pod 0 a stable DNS name for the rendezvous endpoint, a Secret with the
job's token (a fresh random one per manifest; every pod gets it as PADDLE_STORE_TOKEN), and for
elastic jobs (--nnodes=MIN:MAX) an etcd Deployment + Service used as the rendezvous backend
instead, so the job survives the loss of any pod.

With min_nproc (--min-nproc=M) the job is elastic in process (tools/paddlerun/elastic.py): a
worker lost with its pod does not restart the others; they regroup and go on, and the pod the Job
controller starts in its place joins at their next step. The workers' store then runs as a
Deployment of its own (paddle_store_server, Note [Elastic launcher]), so it outlives any pod.

Note [Pods that go away]
An elastic Job must not fail when a pod is lost: its backoffLimit allows max_restarts
replacements per index (a pod that fails is replaced, and its index rejoins), and its
podFailurePolicy ignores pods that failed because they were disrupted (preemption, eviction,
a drained node: condition DisruptionTarget), which then do not count against that limit at all.
Static jobs keep backoffLimit 0: one lost pod ends them, as a lost rank ends an MPI job.

    bazel run //tools:k8s -- --name=fmnist --image=registry/paddle:1 --nnodes=4 --nproc=8 \\
        -- //examples:fashion_mnist --model=cnn > job.yaml; kubectl apply -f job.yaml

manifests() returns the objects as dicts (what the tests check); to_yaml() prints them.
"""
import json
import secrets

RDZV_PORT = 29400
ETCD_PORT = 2379
STORE_PORT = 29401


def _labels(name, component):
    return {"app.kubernetes.io/name": "paddlerun", "app.kubernetes.io/instance": name,
            "app.kubernetes.io/component": component}


def manifests(name, image, nnodes, nproc, program, args=(), max_restarts=3, cpu="2",
              memory="4Gi", min_nproc=0):
    """The objects of one job. nnodes is "N" or "MIN:MAX"; min_nproc > 0 makes it elastic in
    process (paddlerun --min-nproc)."""
    lo, _, hi = str(nnodes).partition(":")
    lo, hi = int(lo), int(hi or lo)
    if not 1 <= lo <= hi:
        raise ValueError(f"nnodes is {nnodes!r}; expected N or MIN:MAX with 1 <= MIN <= MAX")
    if nproc < 1:
        raise ValueError(f"nproc is {nproc}; it must be at least 1")
    if not 0 <= min_nproc <= nproc:
        raise ValueError(f"min_nproc is {min_nproc}; it must be 0 (not elastic in process) to "
                         f"nproc ({nproc})")
    if max_restarts < 0:
        raise ValueError(f"max_restarts is {max_restarts}; it must be at least 0")
    in_process = min_nproc > 0
    elastic = lo != hi or in_process
    worker_labels = _labels(name, "worker")
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "labels": worker_labels},
        "spec": {"clusterIP": "None", "selector": worker_labels,
                 "publishNotReadyAddresses": True,
                 "ports": [{"name": "rdzv", "port": RDZV_PORT, "targetPort": RDZV_PORT}]},
    }
    token_secret = {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": f"{name}-token", "labels": worker_labels},
        "stringData": {"token": secrets.token_hex(16)},
    }
    objects = [service, token_secret]
    launcher = ["paddlerun", f"--nnodes={nnodes}", f"--nproc={nproc}",
                f"--max-restarts={max_restarts}", f"--rdzv-id={name}"]
    if in_process:
        store_name = f"{name}-store"
        store_labels = _labels(name, "store")
        objects += [_deployment(store_name, store_labels, image, "store",
                                ["paddle_store_server", "--host=0.0.0.0", f"--port={STORE_PORT}",
                                 "--until-signal"], STORE_PORT, "store",
                                env=[_token_env(token_secret)]),
                    _service(store_name, store_labels, STORE_PORT, "store")]
        launcher += [f"--min-nproc={min_nproc}", f"--rdzv-endpoint={store_name}:{STORE_PORT}"]
    elif elastic:
        etcd_name = f"{name}-etcd"
        etcd_labels = _labels(name, "etcd")
        objects += [_deployment(etcd_name, etcd_labels, "quay.io/coreos/etcd:v3.4.26", "etcd",
                                ["etcd", "--data-dir=/tmp/etcd",
                                 f"--listen-client-urls=http://0.0.0.0:{ETCD_PORT}",
                                 f"--advertise-client-urls=http://{etcd_name}:{ETCD_PORT}"],
                                ETCD_PORT, "client"),
                    _service(etcd_name, etcd_labels, ETCD_PORT, "client")]
        launcher += ["--rdzv-backend=etcd", f"--rdzv-endpoint={etcd_name}:{ETCD_PORT}"]
    else:
        # Pod 0 of an Indexed Job is <job>-0.<service>; it hosts the tcp store.
        launcher += ["--node-rank=$(JOB_COMPLETION_INDEX)",
                     f"--rdzv-endpoint={name}-0.{name}:{RDZV_PORT}"]
    env = [{"name": "PADDLE_JOB_NAME", "value": name},
           {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
               "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
           {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
           _token_env(token_secret)]
    launcher += ["--local-addr=$(POD_IP)", program, *args]
    job = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": worker_labels},
        "spec": {
            "completionMode": "Indexed", "completions": hi, "parallelism": hi,
            # Note [Pods that go away]
            "backoffLimit": max_restarts * hi if elastic else 0,
            "template": {
                "metadata": {"labels": worker_labels},
                "spec": {
                    "subdomain": name, "restartPolicy": "Never",
                    "containers": [{
                        "name": "paddlerun", "image": image, "command": launcher, "env": env,
                        "ports": [{"name": "rdzv", "containerPort": RDZV_PORT}],
                        "resources": {"requests": {"cpu": cpu, "memory": memory},
                                      "limits": {"cpu": cpu, "memory": memory}},
                    }],
                },
            },
        },
    }
    if elastic:
        job["spec"]["podFailurePolicy"] = {"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    objects.append(job)
    return objects


def _token_env(token_secret):
    return {"name": "PADDLE_STORE_TOKEN", "valueFrom": {"secretKeyRef": {
        "name": token_secret["metadata"]["name"], "key": "token"}}}


def _deployment(name, labels, image, container_name, command, port, port_name, env=()):
    """One replica of `command`, a Deployment: restarted wherever it can run if its pod dies."""
    container = {"name": container_name, "image": image, "command": command,
                 "ports": [{"name": port_name, "containerPort": port}]}
    if env:
        container["env"] = list(env)
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [container]}}}}


def _service(name, labels, port, port_name):
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": labels},
            "spec": {"selector": labels,
                     "ports": [{"name": port_name, "port": port, "targetPort": port}]}}


def to_yaml(objects):
    """YAML documents (JSON is valid YAML; kubectl accepts it)."""
    return "\n---\n".join(json.dumps(o, indent=2) for o in objects) + "\n"
