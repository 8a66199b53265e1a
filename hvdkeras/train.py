"""Command line: ``python -m hvdkeras.train --config FILE [--set a.b=value ...] [--workdir DIR]``.

``--dry_run`` resolves the job and prints its launch command instead of training;
its own flags (``--np``, ``--hosts``, ``--launcher``, ...) are in :mod:`hvdkeras.launch.cli`.

Run it under a launcher for more than one process, e.g.
``horovodrun -np 2 -H localhost:2 --gloo python -m hvdkeras.train --config configs/digits.yaml``.
Every error a user can fix (:class:`hvdkeras.common.errors.HvdkerasError`) ends the run
with one line on stderr and exit status 2; any other exception is a bug and keeps
its traceback (an ``ImportError`` too: a broken install should show where it broke).
"""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow loads: keep its C++ chatter out

from absl import flags

from hvdkeras import config as config_lib
from hvdkeras import train_rank
from hvdkeras.common import command_line, signals, workdir_guard
from hvdkeras.common.errors import HvdkerasError, RankFailedError
from hvdkeras.common.horovod_env import launcher_rank
from hvdkeras.common.workdir import Workdir
from hvdkeras.launch import cli as dry_run

FLAGS = flags.FLAGS
flags.DEFINE_string("config", None, "YAML config file (see configs/).")
flags.DEFINE_multi_string("set", [], "Override one config field: section.key=value (value parsed as YAML). Repeatable.")
flags.DEFINE_string("workdir", None, "Where config.yaml, metrics.jsonl and checkpoints/ go "
                    "(default: runs/<config file name>).")
flags.DEFINE_bool("fresh", False, "Start over in --workdir: its config.yaml, metrics.jsonl and checkpoints move to "
                  "<workdir>/previous/<time>/ (nothing is deleted).")
flags.DEFINE_enum("resume", "auto", ["auto", "force"], "auto: resume from --workdir's checkpoints unless the config "
                  "or the stack (TensorFlow, Keras, Horovod) changes the training they hold (then stop with what "
                  "changed); force: resume anyway, where this stack can load them.")
flags.DEFINE_bool("dry_run", False, "Print world size, batches, scaled lr, steps, Horovod and thread settings and "
                  "the launch command or file for --launcher; start nothing.")


def main(argv):
    """Trains with ``--config`` (or prints the launch with ``--dry_run``). An error the user can fix is raised
    (:func:`run` says it in one line, exit status 2)."""
    fail = command_line.fail
    if len(argv) > 1:
        fail(f"unexpected arguments {' '.join(argv[1:])}; overrides go through --set section.key=value")
    if not FLAGS.config:
        fail("--config is required, e.g. --config configs/digits.yaml")
    workdir = FLAGS.workdir or os.path.join("runs", os.path.splitext(os.path.basename(FLAGS.config))[0])
    misplaced = dry_run.ray_flags_misplaced()
    if misplaced:
        fail(f"{', '.join(misplaced)} only appl{'y' if len(misplaced) > 1 else 'ies'} with --launcher ray")
    given = dry_run.flags_given()
    if given and not FLAGS.dry_run:
        fail(f"{', '.join(given)} only appl{'y' if len(given) > 1 else 'ies'} with --dry_run"
             " (without it, a launcher starts the processes)")
    if FLAGS.dry_run:
        dry_run.main(FLAGS.config, FLAGS.set, FLAGS.workdir, workdir)
        return
    cfg = config_lib.load(FLAGS.config, FLAGS.set)
    if FLAGS.fresh and FLAGS.resume == "force":
        fail("--fresh starts over and --resume=force resumes: pass one of them")
    if launcher_rank() is not None:  # a launcher's rank: its SIGTERM and its launcher's end watched from now on
        signals.install_process_flag(Workdir(workdir).after_launcher())
    if FLAGS.launcher == "ray":
        _train_on_ray(cfg, workdir)
        return
    if launcher_rank() in (None, 0):  # rank 0 alone writes the workdir: it checks before training
        train_rank.own_workdir(cfg, workdir, FLAGS.fresh, FLAGS.resume)
    train_rank.train(cfg, workdir)


def _train_on_ray(cfg: config_lib.Config, workdir: str) -> None:
    """The driver of ``--launcher ray``: ``--np`` ranks on the Ray cluster, started again after a lost worker (only
    the first attempt takes ``--fresh``: the next ones resume what it wrote)."""
    from hvdkeras.ray import job

    if not FLAGS.np or FLAGS.np < 1:
        command_line.fail("--launcher ray needs --np N, the number of ranks, e.g. --np 2")
    config_path, workdir = os.path.abspath(FLAGS.config), os.path.abspath(workdir)
    # a changed config is refused here, at once, not by rank 0 once the cluster has started the ranks
    workdir_guard.check_resumable(workdir, cfg, FLAGS.fresh, FLAGS.resume)
    try:
        job.run_ranks(train_rank.rank, lambda attempt: (config_path, list(FLAGS.set), workdir,
                                                        FLAGS.fresh and attempt == 0, FLAGS.resume),
                      FLAGS.np, dry_run.ray_options())
    except RankFailedError as exc:  # a lost worker with no retry left: the user's next move is to run it again
        raise HvdkerasError(f"the ranks on Ray failed with no retry left (--max_retries={FLAGS.max_retries}): {exc};"
                            f" {workdir} keeps the last checkpoint: run the same command again to resume from it"
                            ) from None


def run():
    """Runs :func:`main` under absl (:func:`hvdkeras.common.command_line.run`: an error the user can fix, a flag absl
    cannot parse too, is one line and exit status 2), then freezes the garbage collector."""
    try:
        command_line.run(main)
    finally:
        _quick_teardown()


def _quick_teardown() -> None:
    """Spares the ending process the interpreter's last garbage collection (``gc.freeze``).

    With TensorFlow loaded, that collection walks TensorFlow's object graph, on every rank at
    the end of every run (its cost: docs/performance.md#figures-behind-defaults). Everything
    the run writes is written and closed before this (checkpoints, the export, metrics.jsonl, the
    Keras callbacks' writers at ``on_train_end``); the teardown itself still runs (``atexit``,
    Horovod's shutdown, the flush of stdout and stderr, each module's objects released by
    reference count). Only objects in reference cycles are left to the operating system, as
    on any process exit. The command line owns the process; the library never does this.
    """
    import gc

    gc.freeze()


if __name__ == "__main__":
    run()
