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
RAY_FLAGS = ("address", "cpus_per_worker", "gpus_per_worker", "max_retries")
DRY_RUN_FLAGS = ("np", "hosts", "launcher", "image", "gpus_per_host", "cores_per_host", "dry_run_output") + RAY_FLAGS


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


def main(config: str, overrides: Sequence[str], workdir: Optional[str], default_workdir: str) -> None:
    """Prints the plan and the launch command (and writes ``--dry_run_output``); starts nothing."""
    print(launch.dry_run(config, overrides, workdir, default_workdir, np=FLAGS.np, hosts=FLAGS.hosts,
                         launcher=FLAGS.launcher, image=FLAGS.image, gpus_per_host=FLAGS.gpus_per_host,
                         cores_per_host=FLAGS.cores_per_host, output=FLAGS.dry_run_output,
                         ray=ray_options()), end="")
