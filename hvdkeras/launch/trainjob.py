"""Kubeflow Trainer v2's ``TrainJob`` (``trainer.kubeflow.org/v1alpha1``) and the ``ClusterTrainingRuntime`` it
refers to: an MPI runtime (``mlPolicy.mpi``, Open MPI, the job's ssh keys at ``/home/mpiuser/.ssh``) on JobSet,
a launcher job running Horovod's ``mpirun`` recipe and a node job of one pod per host running sshd.

The runtime holds what Trainer takes only from a runtime: the nodes' image, the restart rules and the priority
class; it is named after them (``hvdkeras-mpi-<digest>``), so jobs with the same settings share it and the file
creates it once. The job's own values (its command, hosts, ranks, resources, workdir volume, placement) are in the
``TrainJob`` (``trainer`` and ``runtimePatches``).

Preemption requeues: the launcher job's ``podFailurePolicy`` ignores a pod that was disrupted (evicted or
preempted: ``DisruptionTarget``) or that exited 75 (a rank preempted: hvdkeras's status for "rerun me"), so its
pod is started again, without counting against ``backoffLimit``, and resumes from the workdir; a one-line error
(exit 2) fails the job at once; any other exit is started again up to ``backoffLimit`` times, then the job fails
(``failurePolicy.maxRestarts: 0``: the JobSet does not start over after that).
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Dict, List

from hvdkeras.launch import kubernetes_pods as pods
from hvdkeras.launch.commands import job_name, need_uniform, no_elastic
from hvdkeras.launch.plan import Plan

API = "trainer.kubeflow.org/v1alpha1"
TRAINER_VERSION = "v2.3.0"
NEEDS = (f"Kubeflow Trainer {TRAINER_VERSION} or later with JobSet (kubectl apply --server-side -k"
         f" \"https://github.com/kubeflow/trainer.git/manifests/overlays/manager?ref={TRAINER_VERSION}\")")
ANCESTOR = {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}  # the job Trainer gives ``spec.trainer``
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"  # on every pod of the TrainJob's JobSet (named as the TrainJob)
CONTAINER = "node"  # the container name Trainer's MPI runtime gives ``spec.trainer`` and the nodes
PREEMPTED = 75
USER_ERROR = 2
MANAGER = "hvdkeras"


def _restart_rules() -> Dict[str, Any]:
    """A job's pod failure policy: a disrupted pod or exit 75 is started again uncounted, exit 2 fails the job."""
    return {"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
        {"action": "Ignore", "onExitCodes": {"containerName": CONTAINER, "operator": "In", "values": [PREEMPTED]}},
        {"action": "FailJob", "onExitCodes": {"containerName": CONTAINER, "operator": "In", "values": [USER_ERROR]}},
    ]}


def _pod_spec(container: Dict[str, Any], options: pods.KubernetesOptions) -> Dict[str, Any]:
    spec: Dict[str, Any] = {"restartPolicy": "Never", "automountServiceAccountToken": False,
                            "securityContext": pods.POD_SECURITY,
                            "containers": [dict(container, workingDir=pods.HOME,
                                                securityContext=pods.CONTAINER_SECURITY)]}
    if options.priority_class:
        spec["priorityClassName"] = options.priority_class
    return spec


def runtime(options: pods.KubernetesOptions) -> Dict[str, Any]:
    """The ``ClusterTrainingRuntime`` of ``options``' image, restart rules and priority class, named after them."""
    node = {"name": CONTAINER, "image": options.image, "command": pods.SSHD[:1],
            "args": pods.SSHD[1:] + ["-o", "PidFile=/tmp/sshd.pid"],
            "readinessProbe": {"tcpSocket": {"port": 2222}, "initialDelaySeconds": 5}}
    launcher = {"name": CONTAINER, "image": options.image, "env": [{"name": "HOME", "value": "/tmp"}],
                "resources": pods.launcher_resources()}
    spec = {
        "mlPolicy": {"numNodes": 1, "mpi": {"numProcPerNode": 1, "mpiImplementation": "OpenMPI",
                                            "sshAuthMountPath": pods.SSH_AUTH_MOUNT_PATH,
                                            "runLauncherAsNode": False}},
        "template": {"spec": {
            "network": {"publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": ["launcher"]},
            "failurePolicy": {"maxRestarts": 0},
            "replicatedJobs": [
                {"name": "node", "template": {"spec": {
                    "backoffLimit": options.backoff_limit, "podFailurePolicy": _restart_rules(),
                    "template": {"spec": _pod_spec(node, options)}}}},
                {"name": "launcher", "dependsOn": [{"name": "node", "status": "Ready"}],
                 "template": {"metadata": {"labels": dict(ANCESTOR)}, "spec": {
                     "backoffLimit": options.backoff_limit, "podFailurePolicy": _restart_rules(),
                     "template": {"spec": _pod_spec(launcher, options)}}}},
            ],
        }},
    }
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:8]
    return {"apiVersion": API, "kind": "ClusterTrainingRuntime",
            "metadata": {"name": f"hvdkeras-mpi-{digest}", "labels": {"trainer.kubeflow.org/framework": "hvdkeras"}},
            "spec": spec}


def trainjob_documents(p: Plan, options: pods.KubernetesOptions) -> List[Dict[str, Any]]:
    """The ClusterTrainingRuntime, the TrainJob, its NetworkPolicy and, with ``--kubernetes_pvc_size``, the
    workdir's claim."""
    no_elastic(p, "kubernetes")
    slots = need_uniform(p, "kubernetes")
    name = job_name(p)
    workdir = pods.workdir_in_pods(p)
    the_runtime = runtime(options)
    args = pods.launcher_command(p)
    patch_pod = {**pods.placement(options), "volumes": pods.volumes(name, options),
                 "containers": [{"name": CONTAINER, "volumeMounts": pods.mounts(workdir)}]}
    job = {
        "apiVersion": API,
        "kind": "TrainJob",
        "metadata": {"name": name, "labels": pods.labels(options)},
        "spec": {
            "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                           "name": the_runtime["metadata"]["name"]},
            "trainer": {"image": options.image, "command": args[:1], "args": args[1:],
                        "numNodes": len(p.hosts), "numProcPerNode": slots,
                        "resourcesPerNode": pods.resources(p, slots, options)},
            "runtimePatches": [{"manager": MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
                {"name": job_kind, "template": {"spec": {"template": {"spec": patch_pod}}}}
                for job_kind in ("node", "launcher")]}}}}],
        },
    }
    return pods.with_claim([the_runtime, job, pods.network_policy(name, {JOBSET_LABEL: name})], name, options)


def header(p: Plan, options: pods.KubernetesOptions) -> List[str]:
    """The TrainJob file's comment lines: what it runs, what the cluster and the image need, restarts, placement."""
    slots = need_uniform(p, "kubernetes")
    return [
        f"# hvdkeras: {p.np} processes = {len(p.hosts)} node pod(s) x {slots} (numProcPerNode), a Kubeflow Trainer"
        " TrainJob on an MPI ClusterTrainingRuntime; generated by python -m hvdkeras.train --dry_run.",
        f"# The cluster needs {NEEDS};",
        "# the ClusterTrainingRuntime below is cluster-scoped: applying it once needs a cluster administrator.",
        *pods.image_lines(options),
        f"# Restarts: a preempted pod (DisruptionTarget) or a launcher that exits {PREEMPTED} is started again, not"
        " counted, and resumes from the workdir;",
        f"# exit {USER_ERROR} (a one-line error) fails the job at once; other exits are retried up to backoffLimit="
        f"{options.backoff_limit} times.",
        *pods.closing_lines(options),
    ]
