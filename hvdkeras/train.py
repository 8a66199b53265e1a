"""Command line: ``python -m hvdkeras.train --config FILE [--set a.b=value ...] [--workdir DIR]``.

``--dry_run [--np N] [--hosts a:4,b:4] [--launcher horovodrun|mpirun|slurm|kubernetes]`` resolves
the job and prints its launch command instead of training (see :mod:`hvdkeras.launch`).

Run it under a launcher for more than one process, e.g.
``horovodrun -np 2 -H localhost:2 --gloo python -m hvdkeras.train --config configs/digits.yaml``.
"""
from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow loads: keep its C++ chatter out

from absl import app, flags  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("config", None, "YAML config file (see configs/).")
flags.DEFINE_multi_string("set", [], "Override one config field: section.key=value (value parsed as YAML). Repeatable.")
flags.DEFINE_string("workdir", None, "Where config.yaml, metrics.jsonl and checkpoints/ go "
                    "(default: runs/<config file name>).")
# Dry run (hvdkeras/launch.py): resolve the job and print its launch command; start nothing.
flags.DEFINE_bool("dry_run", False, "Print world size, batches, scaled lr, steps, Horovod and thread settings and "
                  "the launch command or file for --launcher; start nothing.")
flags.DEFINE_integer("np", None, "--dry_run: number of processes (default: the slots of --hosts, else 1).")
flags.DEFINE_string("hosts", None, "--dry_run: hosts and processes per host, e.g. a:4,b:4 (default: localhost:np).")
flags.DEFINE_string("launcher", "horovodrun", "--dry_run: horovodrun, mpirun, slurm or kubernetes.")
flags.DEFINE_string("image", "hvdkeras:latest", "--dry_run --launcher kubernetes: the container image.")
flags.DEFINE_integer("gpus_per_host", 0, "--dry_run: GPUs per host (0: CPU hosts).")
flags.DEFINE_integer("cores_per_host", None, "--dry_run: CPU cores per host (default: this machine's).")
flags.DEFINE_string("dry_run_output", None, "--dry_run: also write the launch script or file here.")
_LAUNCH_FLAGS = ("np", "hosts", "launcher", "image", "gpus_per_host", "cores_per_host", "dry_run_output")


def _fail(message: str) -> None:
    """One line on stderr, then exit status 2.

    Most start-up errors (a bad config) happen on every rank alike. Rank 0 prints at
    once; the other ranks wait a moment first, so the launcher, which stops the job
    when rank 0 exits, usually shows the line once. An error only one rank has is
    still printed, by that rank, after the pause.
    """
    from hvdkeras.distributed import launcher_rank

    if launcher_rank() not in (None, 0):
        time.sleep(3)
    print(f"hvdkeras: error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def main(argv):
    if len(argv) > 1:
        _fail(f"unexpected arguments {' '.join(argv[1:])}; overrides go through --set section.key=value")
    if not FLAGS.config:
        _fail("--config is required, e.g. --config configs/digits.yaml")
    from hvdkeras import compat  # noqa: F401  first: TensorFlow's import, with TF_CPP_MIN_LOG_LEVEL honoured
    from hvdkeras import config as config_lib
    from hvdkeras.checkpointing import CheckpointError
    from hvdkeras.distributed import SetupError  # includes PreflightError

    workdir = FLAGS.workdir or os.path.join("runs", os.path.splitext(os.path.basename(FLAGS.config))[0])
    given = [f"--{name}" for name in _LAUNCH_FLAGS if FLAGS[name].present]
    if given and not FLAGS.dry_run:
        _fail(f"{', '.join(given)} only appl{'y' if len(given) > 1 else 'ies'} with --dry_run"
              " (without it, a launcher starts the processes)")
    try:
        if FLAGS.dry_run:
            from hvdkeras import launch

            print(launch.dry_run(FLAGS.config, FLAGS.set, FLAGS.workdir, workdir, np=FLAGS.np, hosts=FLAGS.hosts,
                                 launcher=FLAGS.launcher, image=FLAGS.image, gpus_per_host=FLAGS.gpus_per_host,
                                 cores_per_host=FLAGS.cores_per_host, output=FLAGS.dry_run_output), end="")
            return
        cfg = config_lib.load(FLAGS.config, FLAGS.set)
        if cfg.trainer.api == "estimator":
            from hvdkeras.estimator import train_from_config

            train_from_config(cfg, workdir)
        else:
            from hvdkeras.trainer import Trainer

            Trainer(cfg, workdir).fit()
    except (config_lib.ConfigError, CheckpointError, SetupError, ImportError) as exc:
        _fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)


def run():
    app.run(main)


if __name__ == "__main__":
    run()
