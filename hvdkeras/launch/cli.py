"""The dry run's command line: ``python -m hvdkeras.train --config FILE --dry_run [--np N] [--hosts a:4,b:4] ...``.

The flags below only mean something with ``--dry_run``, but for ``--launcher ray``, which also starts the job
itself (``--np``, ``--address`` and the Ray flags); :mod:`hvdkeras.train` defines the flags every run has and hands
``--dry_run`` over to :func:`main`.
What is printed is :func:`hvdkeras.launch.dry_run`. No TensorFlow or Horovod is
imported to parse these.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

from absl import flags

from hvdkeras import launch
from hvdkeras.launch.kubernetes_pods import APIS, KubernetesOptions, parse_node_selector, parse_tolerations
from hvdkeras.launch.ray import RayOptions

FLAGS = flags.FLAGS
flags.DEFINE_integer("np", None, "--dry_run: number of processes (default: the slots of --hosts, else 1).")
flags.DEFINE_string("hosts", None, "--dry_run: hosts and processes per host, e.g. a:4,b:4 (default: localhost:np).")
flags.DEFINE_string("launcher", "horovodrun", f"--dry_run: {', '.join(launch.LAUNCHERS)}.")
flags.DEFINE_string("image", launch.DEFAULT_IMAGE, "--dry_run --launcher kubernetes: the container image.")
flags.DEFINE_integer("gpus_per_host", 0, "--dry_run: GPUs per host (0: CPU hosts).")
flags.DEFINE_integer("cores_per_host", None, "--dry_run: CPU cores per host (default: this machine's).")
flags.DEFINE_string("dry_run_output", None, "--dry_run: also write the launch script or file here.")
flags.DEFINE_string("address", "auto", "--launcher ray: the Ray cluster: auto (the one this node belongs to) or its"
                    " head's host:port.")
flags.DEFINE_float("cpus_per_worker", 1, "--launcher ray: CPUs each rank's Ray actor takes.")
flags.DEFINE_float("gpus_per_worker", 0, "--launcher ray: GPUs each rank's Ray actor takes (0: no rank uses a GPU).")
flags.DEFINE_integer("max_retries", RayOptions.max_retries, "--launcher ray: how often the ranks start again after a"
                     " lost worker or node, each time resuming from the workdir's last checkpoint.")
flags.DEFINE_enum("kubernetes_api", KubernetesOptions.api, list(APIS), "--launcher kubernetes: trainjob (Kubeflow"
                  " Trainer v2's TrainJob and its ClusterTrainingRuntime) or mpijob (the MPI Operator's MPIJob).")
flags.DEFINE_string("kubernetes_pvc", None, "--launcher kubernetes: an existing ReadWriteMany PersistentVolumeClaim"
                    " that holds the workdir in every pod.")
flags.DEFINE_string("kubernetes_pvc_size", None, "--launcher kubernetes: render a ReadWriteMany claim of this size"
                    " for the workdir (e.g. 20Gi).")
flags.DEFINE_string("kubernetes_storage_class", None, "--launcher kubernetes: the rendered claim's storage class.")
flags.DEFINE_string("kubernetes_node_selector", None, "--launcher kubernetes: the pods' node selector, e.g."
                    " pool=gpu,zone=a.")
flags.DEFINE_string("kubernetes_tolerations", None, "--launcher kubernetes: taints the pods tolerate, e.g."
                    " gpu=true:NoSchedule,spot (key[=value][:effect]).")
flags.DEFINE_string("kubernetes_priority_class", None, "--launcher kubernetes: the pods' priorityClassName.")
flags.DEFINE_string("kubernetes_queue", None, "--launcher kubernetes: the Kueue LocalQueue (label"
                    " kueue.x-k8s.io/queue-name).")
flags.DEFINE_string("kubernetes_memory_per_rank", KubernetesOptions.memory_per_rank, "--launcher kubernetes: each"
                    " rank's memory request and limit.")
flags.DEFINE_integer("kubernetes_backoff_limit", KubernetesOptions.backoff_limit, "--launcher kubernetes: how often"
                     " a failed launcher starts again (a preemption does not count with trainjob).")
RAY_FLAGS = ("address", "cpus_per_worker", "gpus_per_worker", "max_retries")
KUBERNETES_FLAGS = ("kubernetes_api", "kubernetes_pvc", "kubernetes_pvc_size", "kubernetes_storage_class",
                    "kubernetes_node_selector", "kubernetes_tolerations", "kubernetes_priority_class",
                    "kubernetes_queue", "kubernetes_memory_per_rank", "kubernetes_backoff_limit")
DRY_RUN_FLAGS = (("np", "hosts", "launcher", "image", "gpus_per_host", "cores_per_host", "dry_run_output") + RAY_FLAGS
                 + KUBERNETES_FLAGS)


def flags_given() -> List[str]:
    """The dry-run flags on the command line, as ``--name``, that a run without ``--dry_run`` may not take (all but
    ``--launcher ray``'s own and ``--np``)."""
    if FLAGS.launcher == "ray":
        return [f"--{name}" for name in DRY_RUN_FLAGS if FLAGS[name].present and name not in RAY_FLAGS + ("np",
                                                                                                      "launcher")]
    return [f"--{name}" for name in DRY_RUN_FLAGS if FLAGS[name].present]


def ray_flags_misplaced() -> List[str]:
    """The Ray flags given with another launcher than ``ray``, as ``--name``."""
    return [f"--{name}" for name in RAY_FLAGS if FLAGS[name].present] if FLAGS.launcher != "ray" else []


def ray_options() -> RayOptions:
    """The Ray launch's options from the flags."""
    return RayOptions(address=FLAGS.address, cpus_per_worker=FLAGS.cpus_per_worker,
                      gpus_per_worker=FLAGS.gpus_per_worker, max_retries=FLAGS.max_retries)


def kubernetes_options() -> KubernetesOptions:
    """The Kubernetes launch's options from the flags (checked when the manifest is rendered)."""
    return KubernetesOptions(
        api=FLAGS.kubernetes_api, image=FLAGS.image, pvc=FLAGS.kubernetes_pvc, pvc_size=FLAGS.kubernetes_pvc_size,
        storage_class=FLAGS.kubernetes_storage_class,
        node_selector=parse_node_selector(FLAGS.kubernetes_node_selector),
        tolerations=parse_tolerations(FLAGS.kubernetes_tolerations), priority_class=FLAGS.kubernetes_priority_class,
        queue=FLAGS.kubernetes_queue, memory_per_rank=FLAGS.kubernetes_memory_per_rank,
        backoff_limit=FLAGS.kubernetes_backoff_limit)


def main(config: str, overrides: Sequence[str], workdir: Optional[str], default_workdir: str) -> None:
    """Prints the plan and the launch command (and writes ``--dry_run_output``); starts nothing."""
    print(launch.dry_run(config, overrides, workdir, default_workdir, np=FLAGS.np, hosts=FLAGS.hosts,
                         launcher=FLAGS.launcher, image=FLAGS.image, gpus_per_host=FLAGS.gpus_per_host,
                         cores_per_host=FLAGS.cores_per_host, output=FLAGS.dry_run_output,
                         ray=ray_options(), kubernetes=kubernetes_options()), end="")
