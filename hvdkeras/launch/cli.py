"""The dry run's command line: ``python -m hvdkeras.train --config FILE --dry_run [--np N] [--hosts a:4,b:4] ...``.

The flags below only mean something with ``--dry_run``; :mod:`hvdkeras.train`
defines the flags every run has and hands ``--dry_run`` over to :func:`main`.
What is printed is :func:`hvdkeras.launch.dry_run`. No TensorFlow or Horovod is
imported to parse these.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

from absl import flags

from hvdkeras import launch

FLAGS = flags.FLAGS
flags.DEFINE_integer("np", None, "--dry_run: number of processes (default: the slots of --hosts, else 1).")
flags.DEFINE_string("hosts", None, "--dry_run: hosts and processes per host, e.g. a:4,b:4 (default: localhost:np).")
flags.DEFINE_string("launcher", "horovodrun", f"--dry_run: {', '.join(launch.LAUNCHERS)}.")
flags.DEFINE_string("image", launch.DEFAULT_IMAGE, "--dry_run --launcher kubernetes: the container image.")
flags.DEFINE_integer("gpus_per_host", 0, "--dry_run: GPUs per host (0: CPU hosts).")
flags.DEFINE_integer("cores_per_host", None, "--dry_run: CPU cores per host (default: this machine's).")
flags.DEFINE_string("dry_run_output", None, "--dry_run: also write the launch script or file here.")
DRY_RUN_FLAGS = ("np", "hosts", "launcher", "image", "gpus_per_host", "cores_per_host", "dry_run_output")


def flags_given() -> List[str]:
    """The dry-run flags on the command line, as ``--name`` (an error without ``--dry_run``)."""
    return [f"--{name}" for name in DRY_RUN_FLAGS if FLAGS[name].present]


def main(config: str, overrides: Sequence[str], workdir: Optional[str], default_workdir: str) -> None:
    """Prints the plan and the launch command (and writes ``--dry_run_output``); starts nothing."""
    print(launch.dry_run(config, overrides, workdir, default_workdir, np=FLAGS.np, hosts=FLAGS.hosts,
                         launcher=FLAGS.launcher, image=FLAGS.image, gpus_per_host=FLAGS.gpus_per_host,
                         cores_per_host=FLAGS.cores_per_host, output=FLAGS.dry_run_output), end="")
