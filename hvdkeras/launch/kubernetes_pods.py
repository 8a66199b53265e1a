"""What every Kubernetes target shares: the options (image, workdir volume, placement, restarts), the pods' security,
volumes and placement, the workdir's ``PersistentVolumeClaim`` and the job's ``NetworkPolicy``.

Everything here is checked before it is written: a value from a flag that Kubernetes would refuse (a name, a label,
a quantity, a taint's effect) is one line (:class:`~hvdkeras.common.errors.LaunchError`), never a manifest a
cluster refuses later.
"""
from __future__ import annotations

import dataclasses
import posixpath
import re
from typing import Any, Dict, List, Optional, Tuple

from hvdkeras.common.errors import LaunchError, shown
from hvdkeras.launch.commands import DEFAULT_IMAGE, mpirun_args
from hvdkeras.launch.plan import Plan

APIS = ("trainjob", "mpijob")
# An OCI image reference (the distribution project's grammar): [registry[:port]/]path[:tag][@digest].
_DOMAIN = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]+)?/)?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE = re.compile(rf"{_DOMAIN}{_COMPONENT}(?:/{_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
                   r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?")
NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # an RFC 1123 label: a claim's, a queue's name
SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")  # a priority class's, a storage class's name
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_KEY = re.compile(rf"(?:{SUBDOMAIN.pattern}/)?{_LABEL_NAME}")
LABEL_VALUE = re.compile(rf"(?:{_LABEL_NAME})?")
QUANTITY = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?)(?:Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# The MPI launchers' non-root convention (the MPI Operator's and Kubeflow Trainer's base images, and the
# Containerfile): user mpiuser, UID 1000, sshd on port 2222 from ~/.sshd_config, the job's keys at ~/.ssh.
UID = 1000
HOME = "/home/mpiuser"
SSH_AUTH_MOUNT_PATH = f"{HOME}/.ssh"
SSHD = ["/usr/sbin/sshd", "-De", "-f", f"{HOME}/.sshd_config"]
POD_SECURITY = {"runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID, "fsGroup": UID,
                "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY = {"runAsNonRoot": True, "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                      "capabilities": {"drop": ["ALL"]}}
# The writable places on a read-only root: /tmp (HOME too: Python's libraries keep caches there) and the workdir.
TMP, WORK = "tmp", "work"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
SECURITY_COMMENT = (
    "# Security: every pod runs as UID 1000 (runAsNonRoot), every capability dropped, no privilege escalation, the\n"
    "# runtime's seccomp profile, a read-only root filesystem with /tmp and the workdir writable, no service-account\n"
    "# token; the nodes' sshd listens on 2222 as that user. The NetworkPolicy admits to the job's pods only\n"
    "# traffic from the job's own pods.")


@dataclasses.dataclass(frozen=True)
class KubernetesOptions:
    """The Kubernetes launch's options (``--kubernetes_*`` flags).

    Args:
        api: ``trainjob`` (Kubeflow Trainer v2's ``TrainJob`` and its ``ClusterTrainingRuntime``) or ``mpijob``
            (the MPI Operator's ``kubeflow.org/v2beta1`` ``MPIJob``).
        image: the container image (the Containerfile's).
        pvc: an existing ``PersistentVolumeClaim`` (ReadWriteMany) to hold the workdir.
        pvc_size: the size of a claim rendered with the job (e.g. ``20Gi``), when ``pvc`` is not given.
        storage_class: the rendered claim's storage class (default: the cluster's).
        node_selector: the nodes the pods may run on (label key -> value).
        tolerations: taints the pods tolerate: (key, value or None for any, effect or None for all).
        priority_class: the pods' ``priorityClassName``.
        queue: the Kueue ``LocalQueue`` the job is submitted to (label ``kueue.x-k8s.io/queue-name``).
        memory_per_rank: each rank's memory request and limit.
        backoff_limit: how often a failed launcher is started again (preemptions do not count on ``trainjob``).
    """

    api: str = "trainjob"
    image: str = DEFAULT_IMAGE
    pvc: Optional[str] = None
    pvc_size: Optional[str] = None
    storage_class: Optional[str] = None
    node_selector: Tuple[Tuple[str, str], ...] = ()
    tolerations: Tuple[Tuple[str, Optional[str], Optional[str]], ...] = ()
    priority_class: Optional[str] = None
    queue: Optional[str] = None
    memory_per_rank: str = "4Gi"
    backoff_limit: int = 3

    def check(self) -> "KubernetesOptions":
        """Itself, once every value is one Kubernetes takes; else LaunchError in one line naming the flag."""
        if self.api not in APIS:
            raise LaunchError(f"--kubernetes_api {shown(self.api)} is not one of {', '.join(APIS)}")
        if len(self.image) > 255 or not IMAGE.fullmatch(self.image):
            raise LaunchError(f"--image {shown(self.image)} is not an image reference ([registry[:port]/]name[:tag]"
                              "[@digest], lower case path, e.g. registry.example.com/team/hvdkeras:1.0)")
        for flag, value, pattern in (("--kubernetes_pvc", self.pvc, NAME), ("--kubernetes_queue", self.queue, NAME),
                                     ("--kubernetes_storage_class", self.storage_class, SUBDOMAIN),
                                     ("--kubernetes_priority_class", self.priority_class, SUBDOMAIN)):
            if value is not None and not pattern.fullmatch(value):
                raise LaunchError(f"{flag} {shown(value)} is not a Kubernetes name (lower case letters, digits and"
                                  " '-', starting and ending with a letter or digit)")
        if self.pvc and (self.pvc_size or self.storage_class):
            raise LaunchError("--kubernetes_pvc names a claim that exists; --kubernetes_pvc_size and"
                              " --kubernetes_storage_class render a new one: pass one or the other")
        if self.storage_class and not self.pvc_size:
            raise LaunchError("--kubernetes_storage_class needs --kubernetes_pvc_size, the size of the claim to render")
        for flag, value in (("--kubernetes_pvc_size", self.pvc_size), ("--kubernetes_memory_per_rank",
                                                                        self.memory_per_rank)):
            if value is not None and not QUANTITY.fullmatch(value):
                raise LaunchError(f"{flag} {shown(value)} is not a Kubernetes quantity (e.g. 20Gi, 512Mi)")
        if self.backoff_limit < 0:
            raise LaunchError(f"--kubernetes_backoff_limit must be 0 or more (Received: {self.backoff_limit})")
        return self


def _label(flag: str, key: str, value: Optional[str]) -> None:
    if not (len(key) <= 316 and LABEL_KEY.fullmatch(key)) or (value is not None and not (
            len(value) <= 63 and LABEL_VALUE.fullmatch(value))):
        raise LaunchError(f"{flag}: {shown(key if value is None else f'{key}={value}')} is not a label (key=value:"
                          " letters, digits, '-', '_', '.', a key may have a DNS prefix/)")


def parse_node_selector(text: Optional[str]) -> Tuple[Tuple[str, str], ...]:
    """``a=b,c=d`` as ((key, value), ...); LaunchError in one line for anything that is not a label."""
    pairs = []
    for item in filter(None, (t.strip() for t in (text or "").split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise LaunchError(f"--kubernetes_node_selector: {shown(item)} is not key=value")
        _label("--kubernetes_node_selector", key, value)
        pairs.append((key, value))
    return tuple(pairs)


def parse_tolerations(text: Optional[str]) -> Tuple[Tuple[str, Optional[str], Optional[str]], ...]:
    """``key=value:Effect,key:Effect,key`` as ((key, value or None, effect or None), ...): a taint with that key
    and value (any value without ``=value``), of that effect (every effect without ``:Effect``)."""
    found = []
    for item in filter(None, (t.strip() for t in (text or "").split(","))):
        taint, _, effect = item.partition(":")
        key, sep, value = taint.partition("=")
        if effect and effect not in EFFECTS:
            raise LaunchError(f"--kubernetes_tolerations: {shown(item)} has the effect {shown(effect)}, not one of"
                              f" {', '.join(EFFECTS)}")
        _label("--kubernetes_tolerations", key, value if sep else None)
        found.append((key, value if sep else None, effect or None))
    return tuple(found)


def workdir_in_pods(p: Plan) -> str:
    """Where the job's workdir is in the containers: its ``--workdir``, under the home when relative."""
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
    if workdir in ("/", HOME, "/tmp") or posixpath.commonpath([workdir, SSH_AUTH_MOUNT_PATH]) == SSH_AUTH_MOUNT_PATH:
        raise LaunchError(f"--workdir {shown(given)} would be mounted over {workdir} in the pods; pass a folder of its"
                          " own, e.g. --workdir runs/myjob")
    return workdir


def claim_name(name: str, options: KubernetesOptions) -> Optional[str]:
    """The claim that holds the workdir: ``--kubernetes_pvc``, or the one rendered with the job, or None."""
    return options.pvc or (f"{name}-workdir" if options.pvc_size else None)


def no_volume_note(options: KubernetesOptions) -> Optional[str]:
    """The dry run's line when the workdir is on no volume the pods share (None when it is)."""
    if options.pvc or options.pvc_size:
        return None
    return ("the workdir is an emptyDir that goes with the pods: a restarted or requeued job cannot resume; pass"
            " --kubernetes_pvc NAME (a ReadWriteMany claim) or --kubernetes_pvc_size 20Gi")


def persistent_volume_claim(name: str, options: KubernetesOptions) -> Dict[str, Any]:
    """The workdir's claim rendered with the job (``--kubernetes_pvc_size``): ReadWriteMany, every pod mounts it."""
    spec: Dict[str, Any] = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": options.pvc_size}}}
    if options.storage_class:
        spec["storageClassName"] = options.storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": f"{name}-workdir"},
            "spec": spec}


def volumes(name: str, options: KubernetesOptions) -> List[Dict[str, Any]]:
    """The pods' volumes: /tmp, and the workdir: the claim, or an emptyDir without one."""
    claim = claim_name(name, options)
    work: Dict[str, Any] = {"persistentVolumeClaim": {"claimName": claim}} if claim else {"emptyDir": {}}
    return [{"name": TMP, "emptyDir": {}}, {"name": WORK, **work}]


def mounts(workdir: str) -> List[Dict[str, Any]]:
    """Each container's writable mounts: /tmp and the workdir, at the same path in every pod."""
    return [{"name": TMP, "mountPath": "/tmp"}, {"name": WORK, "mountPath": workdir}]


def tolerations(options: KubernetesOptions) -> List[Dict[str, Any]]:
    """``--kubernetes_tolerations`` as the pods' tolerations."""
    out = []
    for key, value, effect in options.tolerations:
        item: Dict[str, Any] = {"key": key, "operator": "Equal" if value is not None else "Exists"}
        if value is not None:
            item["value"] = value
        if effect:
            item["effect"] = effect
        out.append(item)
    return out


def placement(options: KubernetesOptions) -> Dict[str, Any]:
    """The pods' node selector and tolerations (written out also when empty: the rendered file shows them)."""
    return {"nodeSelector": dict(options.node_selector), "tolerations": tolerations(options)}


def resources(p: Plan, slots: int, options: KubernetesOptions) -> Dict[str, Any]:
    """A node pod's requests and limits: the host's cores, ``slots`` ranks' memory, its GPUs."""
    number = re.fullmatch(r"([0-9.]+)(.*)", options.memory_per_rank)
    assert number is not None  # checked by KubernetesOptions.check
    amount = float(number.group(1)) * slots
    limits: Dict[str, Any] = {"cpu": p.cores_per_host,
                              "memory": f"{int(amount) if amount.is_integer() else amount}{number.group(2)}"}
    if p.gpus_per_host:
        limits["nvidia.com/gpu"] = p.gpus_per_host
    return {"requests": dict(limits), "limits": limits}


def labels(options: KubernetesOptions) -> Dict[str, str]:
    """The job's own labels: its Kueue queue, if any."""
    return {QUEUE_LABEL: options.queue} if options.queue else {}


def network_policy(name: str, selector: Dict[str, str]) -> Dict[str, Any]:
    """A NetworkPolicy that lets into the job's pods (``selector``) only what comes from the job's own pods."""
    pods = {"matchLabels": selector}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": f"{name}-only-the-job"},
            "spec": {"podSelector": pods, "policyTypes": ["Ingress"], "ingress": [{"from": [{"podSelector": pods}]}]}}


def placement_comment(options: KubernetesOptions) -> str:
    """The header's line on where the pods may run and what they ask for, defaults included."""
    selector = ",".join(f"{k}={v}" for k, v in options.node_selector) or "none"
    taints = ",".join(f"{k}{'=' + v if v is not None else ''}{':' + e if e else ''}"
                      for k, v, e in options.tolerations) or "none"
    return (f"# Placement: node selector {selector}; tolerations {taints}; priority class"
            f" {options.priority_class or 'none (the cluster default)'}; Kueue queue {options.queue or 'none'};"
            f" {options.memory_per_rank} per rank.")


def launcher_command(p: Plan) -> List[str]:
    """The launcher's argv: Horovod's mpirun recipe without ``-H`` (the operator writes the host file), HOME passed
    on so the ranks' caches go under /tmp too (ssh finds ~/.ssh by the user, not HOME)."""
    args = mpirun_args(p, hosts=False)
    args[3:3] = ["-x", "HOME"]
    return args


def launcher_resources() -> Dict[str, Any]:
    """The launcher's requests and limits: it only runs mpirun."""
    return {"requests": {"cpu": 1, "memory": "1Gi"}, "limits": {"cpu": 1, "memory": "1Gi"}}


def with_claim(documents: List[Dict[str, Any]], name: str, options: KubernetesOptions) -> List[Dict[str, Any]]:
    """``documents`` and, with ``--kubernetes_pvc_size``, the workdir's claim rendered with the job."""
    if options.pvc_size and not options.pvc:
        documents.append(persistent_volume_claim(name, options))
    return documents


def image_lines(options: KubernetesOptions) -> List[str]:
    """The header's lines on the image both targets run."""
    image = f"# The image ({options.image}) is the Containerfile's: hvdkeras, Horovod built with MPI, sshd on port 2222"
    return [image,
            f"# as mpiuser (UID {UID}); the config file in {HOME}. Each rank gets {options.memory_per_rank}."]


def closing_lines(options: KubernetesOptions) -> List[str]:
    """The header's last lines: placement, security, how to apply."""
    return [placement_comment(options), SECURITY_COMMENT, "# kubectl apply --server-side -f <this file>"]

