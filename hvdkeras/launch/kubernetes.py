"""Kubernetes: a Kubeflow MPI Operator ``MPIJob`` running Horovod's mpirun recipe."""
from __future__ import annotations

import posixpath
import re
from typing import Any, Dict

import yaml

from hvdkeras.common.errors import LaunchError, shown
from hvdkeras.launch.commands import DEFAULT_IMAGE, job_name, mpirun_args, need_uniform, no_elastic
from hvdkeras.launch.plan import Plan

# An OCI image reference (the distribution project's grammar): [registry[:port]/]path[:tag][@digest].
_DOMAIN = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]+)?/)?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE = re.compile(rf"{_DOMAIN}{_COMPONENT}(?:/{_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
                   r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?")
# The MPI Operator's non-root convention (its base images, examples/v2beta1/pi): user mpiuser, UID 1000, sshd on
# port 2222 from ~/.sshd_config, the job's ssh keys mounted at ~/.ssh (spec.sshAuthMountPath).
UID = 1000
HOME = "/home/mpiuser"
SSH_AUTH_MOUNT_PATH = f"{HOME}/.ssh"
JOB_LABEL = "training.kubeflow.org/job-name"  # the operator's label on every pod of a job
POD_SECURITY = {"runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID, "fsGroup": UID,
                "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY = {"runAsNonRoot": True, "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                      "capabilities": {"drop": ["ALL"]}}
# The writable places on a read-only root: /tmp (HOME too: Python's libraries keep caches there) and the workdir.
TMP, WORK = "tmp", "work"
MEMORY_PER_SLOT_GI = 4  # each rank's memory request and limit: a TensorFlow process with a mid-sized model
SECURITY_COMMENT = (
    "# Security: both pods run as UID 1000 (runAsNonRoot), every capability dropped, no privilege escalation, the\n"
    "# runtime's seccomp profile, a read-only root filesystem with /tmp and the workdir writable, no service-account\n"
    "# token; the workers' sshd listens on 2222 as that user. The NetworkPolicy admits to the job's pods only\n"
    "# traffic from the job's own pods.")


def _workdir(p: Plan) -> str:
    """Where the job's workdir is in the containers: its ``--workdir``, under the working directory when relative."""
    args = list(p.train_args)
    given = next((a.split("=", 1)[1] for a in args if a.startswith("--workdir=")), None)
    if given is None and "--workdir" in args[:-1]:
        given = args[args.index("--workdir") + 1]
    if given is None:
        config = next((a.split("=", 1)[1] for a in args if a.startswith("--config=")), None)
        if config is None and "--config" in args[:-1]:
            config = args[args.index("--config") + 1]
        given = posixpath.join("runs", posixpath.splitext(posixpath.basename(config or "job"))[0])
    workdir = posixpath.normpath(posixpath.join(HOME, given))
    if workdir in ("/", HOME, "/tmp"):
        raise LaunchError(f"--workdir {shown(given)} would be mounted over {workdir} in the pods; pass a folder of its"
                          " own, e.g. --workdir runs/myjob")
    return workdir


def _pod(container: Dict[str, Any], workdir: str) -> Dict[str, Any]:
    """A pod template's spec around ``container``: non-root, no token, /tmp and the workdir writable."""
    container = dict(container, workingDir=HOME, securityContext=CONTAINER_SECURITY,
                     volumeMounts=[{"name": TMP, "mountPath": "/tmp"}, {"name": WORK, "mountPath": workdir}])
    return {"automountServiceAccountToken": False, "securityContext": POD_SECURITY,
            "containers": [container], "volumes": [{"name": TMP, "emptyDir": {}}, {"name": WORK, "emptyDir": {}}]}


def network_policy(name: str) -> Dict[str, Any]:
    """A NetworkPolicy that lets into the job's pods only what comes from the job's own pods."""
    pods = {"matchLabels": {JOB_LABEL: name}}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": f"{name}-only-the-job"},
            "spec": {"podSelector": pods, "policyTypes": ["Ingress"], "ingress": [{"from": [{"podSelector": pods}]}]}}


def check_image(image: str) -> str:
    """``image`` if it is an OCI image reference (``registry:5000/team/hvdkeras:1.0``); else LaunchError in one line."""
    if len(image) > 255 or not IMAGE.fullmatch(image):
        raise LaunchError(f"--image {shown(image)} is not an image reference ([registry[:port]/]name[:tag][@digest],"
                          " lower case path, e.g. registry.example.com/team/hvdkeras:1.0)")
    return image


def kubernetes_manifest(p: Plan, image: str = DEFAULT_IMAGE) -> str:
    """A Kubeflow MPI Operator ``MPIJob`` (``kubeflow.org/v2beta1``): one worker pod per host.

    ``slotsPerWorker`` processes per worker pod; the launcher runs Horovod's
    ``mpirun`` recipe (the operator provides the host file, so no ``-H``).
    """
    no_elastic(p, "kubernetes")
    check_image(image)
    slots = need_uniform(p, "kubernetes")
    name = job_name(p)
    limits: Dict[str, object] = {"cpu": p.cores_per_host}
    if p.gpus_per_host:
        limits["nvidia.com/gpu"] = p.gpus_per_host
    launcher_args = mpirun_args(p, hosts=False)
    launcher_args[3:3] = ["-x", "HOME"]  # the ranks' caches under /tmp too (ssh finds ~/.ssh by the user, not HOME)
    workdir = _workdir(p)
    launcher = {"name": "launcher", "image": image, "command": launcher_args[:1], "args": launcher_args[1:],
                "env": [{"name": "HOME", "value": "/tmp"}],
                "resources": {"requests": {"cpu": 1, "memory": "1Gi"}, "limits": {"cpu": 1, "memory": "1Gi"}}}
    limits["memory"] = f"{MEMORY_PER_SLOT_GI * slots}Gi"
    worker = {"name": "worker", "image": image, "command": ["/usr/sbin/sshd"],
              "args": ["-De", "-f", f"{HOME}/.sshd_config", "-o", "PidFile=/tmp/sshd.pid"],
              "resources": {"requests": dict(limits), "limits": limits}}
    manifest = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name},
        "spec": {
            "slotsPerWorker": slots,
            "sshAuthMountPath": SSH_AUTH_MOUNT_PATH,
            "runPolicy": {"cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": _pod(launcher, workdir)}},
                "Worker": {"replicas": len(p.hosts), "template": {"spec": _pod(worker, workdir)}},
            },
        },
    }
    header = [
        f"# hvdkeras: {p.np} processes = {len(p.hosts)} worker pod(s) x {slots} (slotsPerWorker);"
        " generated by python -m hvdkeras.train --dry_run.",
        f"# The image ({image}) must have hvdkeras installed (pip) with python on PATH, Horovod built with",
        "# MPI (python -m hvdkeras.build_horovod; `horovodrun --check-build` lists MPI) and the config file in",
        f"# {HOME}, on the MPI Operator's base image (user mpiuser, UID {UID}; sshd on port 2222 from",
        f"# {HOME}/.sshd_config). The workdir's volume is an emptyDir: replace it with one the pods share",
        f"# to keep the checkpoints. Each rank gets {MEMORY_PER_SLOT_GI}Gi: change resources for your model.",
        SECURITY_COMMENT,
        "# kubectl apply -f <this file>",
    ]
    return "\n".join(header) + "\n" + yaml.safe_dump_all([manifest, network_policy(name)], sort_keys=False,
                                                         default_flow_style=False)
