"""Kubernetes manifests for a paddlerun job: an Indexed Job whose pods run one launcher each, a
headless Service that gives pod 0 a stable DNS name for the rendezvous endpoint, a Secret with the
job's token (a fresh random one per manifest; every pod gets it as PADDLE_STORE_TOKEN), and for
elastic jobs (--nnodes=MIN:MAX) an etcd Deployment + Service used as the rendezvous backend
instead, so the job survives the loss of any pod.

    python3 -m k8s --name=fmnist --image=registry/paddle:1 --nnodes=4 --nproc=8 \\
        -- //examples:fashion_mnist --model=cnn > job.yaml; kubectl apply -f job.yaml

manifests() returns the objects as dicts (what the tests check); to_yaml() prints them.
"""
import json
import secrets

RDZV_PORT = 29400
ETCD_PORT = 2379


def _labels(name, component):
    return {"app.kubernetes.io/name": "paddlerun", "app.kubernetes.io/instance": name,
            "app.kubernetes.io/component": component}


def manifests(name, image, nnodes, nproc, program, args=(), max_restarts=3, cpu="2",
              memory="4Gi"):
    """The objects of one job. nnodes is "N" or "MIN:MAX"."""
    lo, _, hi = str(nnodes).partition(":")
    lo, hi = int(lo), int(hi or lo)
    if not 1 <= lo <= hi:
        raise ValueError(f"nnodes is {nnodes!r}; expected N or MIN:MAX with 1 <= MIN <= MAX")
    if nproc < 1:
        raise ValueError(f"nproc is {nproc}; it must be at least 1")
    elastic = lo != hi
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
    if elastic:
        etcd_name = f"{name}-etcd"
        etcd_labels = _labels(name, "etcd")
        objects += [{
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": etcd_name, "labels": etcd_labels},
            "spec": {"replicas": 1, "selector": {"matchLabels": etcd_labels},
                     "template": {"metadata": {"labels": etcd_labels}, "spec": {"containers": [{
                         "name": "etcd", "image": "quay.io/coreos/etcd:v3.4.26",
                         "command": ["etcd", "--data-dir=/tmp/etcd",
                                     f"--listen-client-urls=http://0.0.0.0:{ETCD_PORT}",
                                     f"--advertise-client-urls=http://{etcd_name}:{ETCD_PORT}"],
                         "ports": [{"name": "client", "containerPort": ETCD_PORT}]}]}}},
        }, {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": etcd_name, "labels": etcd_labels},
            "spec": {"selector": etcd_labels,
                     "ports": [{"name": "client", "port": ETCD_PORT, "targetPort": ETCD_PORT}]},
        }]
        launcher += ["--rdzv-backend=etcd", f"--rdzv-endpoint={etcd_name}:{ETCD_PORT}"]
    else:
        # Pod 0 of an Indexed Job is <job>-0.<service>; it hosts the tcp store.
        launcher += ["--node-rank=$(JOB_COMPLETION_INDEX)",
                     f"--rdzv-endpoint={name}-0.{name}:{RDZV_PORT}"]
    env = [{"name": "PADDLE_JOB_NAME", "value": name},
           {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
               "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
           {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
           {"name": "PADDLE_STORE_TOKEN", "valueFrom": {"secretKeyRef": {
               "name": token_secret["metadata"]["name"], "key": "token"}}}]
    launcher += ["--local-addr=$(POD_IP)", program, *args]
    job = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": worker_labels},
        "spec": {
            "completionMode": "Indexed", "completions": hi, "parallelism": hi,
            "backoffLimit": 0,
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
    objects.append(job)
    return objects


def to_yaml(objects):
    """YAML documents (JSON is valid YAML; kubectl accepts it)."""
    return "\n---\n".join(json.dumps(o, indent=2) for o in objects) + "\n"
