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
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow loads: keep its C++ chatter out

from absl import flags

from hvdkeras import config as config_lib
from hvdkeras.common import command_line, processes, signals, workdir_guard
from hvdkeras.common.errors import SetupError
from hvdkeras.common.horovod_env import launcher_rank
from hvdkeras.common.workdir import Workdir, check_writable
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


def _leave_after_preemption(status: int) -> None:
    """A rank other than 0 after a preemption: exit 75 at once, skipping the interpreter's teardown.

    Rank 0's checkpoint is written and its process is gone (the preemption callback waited for
    that), or the signal came outside training's preemption checks and there is nothing to save
    (:mod:`hvdkeras.common.signals`), so nothing is left to coordinate; Horovod's shutdown would wait
    on the departed peer until the launcher kills this rank (status 137 after horovodrun's grace:
    docs/reliability.md#preemption-in-detail). The command line owns the process, so it may end it
    like this; the library does not.
    """
    processes.exit_now(status, exit_handlers=False)


def _train(cfg: config_lib.Config, workdir: str) -> None:
    """Trains on this rank with the API the config names (imports TensorFlow and Horovod)."""
    from hvdkeras.runtime import tensorflow_import

    tensorflow_import.load()  # first, so TensorFlow's start-up lines honour TF_CPP_MIN_LOG_LEVEL
    from hvdkeras.callbacks.preemption import Preempted
    from hvdkeras.runtime import compat

    if cfg.trainer.api == "estimator":
        if compat.estimator_unavailable():
            raise SetupError(compat.estimator_unavailable())
        from hvdkeras.tf_estimator import train_from_config

        train_from_config(cfg, workdir)
        return
    from hvdkeras.training.trainer import train_and_evaluate

    try:
        train_and_evaluate(cfg, workdir)
    except Preempted as exc:
        if launcher_rank() not in (None, 0):
            _leave_after_preemption(exc.code)
        raise


_CLAIM = None  # rank 0's lock on the workdir, held until the process ends


def _own_workdir(cfg: config_lib.Config, workdir: str) -> None:
    """Rank 0, before training: the workdir is writable, this job's alone (hvdkeras.common.workdir_guard), cleared of
    the unfinished writes a killed job left, and holds
    no other training's checkpoints, by config or by stack (or --fresh moves them aside, or --resume=force takes
    them as they are where this stack can load them)."""
    global _CLAIM
    check_writable(workdir)
    _CLAIM = workdir_guard.claim(workdir)
    left = workdir_guard.remove_staging(workdir, _CLAIM)  # a killed writer's, before this job writes anything
    if left:
        print(f"[hvdkeras] removed {len(left)} unfinished write{'s' if len(left) > 1 else ''} a stopped job left"
              f" in {workdir} ({', '.join(os.path.relpath(p, workdir) for p in left[:3])}"
              f"{', ...' if len(left) > 3 else ''})", flush=True)
    if FLAGS.fresh:
        moved = workdir_guard.start_over(workdir)
        if moved:
            print(f"[hvdkeras] --fresh: the previous run in {workdir} moved to {moved}", flush=True)
    elif FLAGS.resume == "force":
        changed = workdir_guard.forced_changes(workdir, cfg)
        if changed:
            print(f"[hvdkeras] --resume=force: resuming from checkpoints trained with {'; '.join(changed)}",
                  file=sys.stderr, flush=True)
    else:
        workdir_guard.check_same_training(workdir, cfg)


def main(argv):
    """Trains with ``--config`` (or prints the launch with ``--dry_run``). An error the user can fix is raised
    (:func:`run` says it in one line, exit status 2)."""
    fail = command_line.fail
    if len(argv) > 1:
        fail(f"unexpected arguments {' '.join(argv[1:])}; overrides go through --set section.key=value")
    if not FLAGS.config:
        fail("--config is required, e.g. --config configs/digits.yaml")
    workdir = FLAGS.workdir or os.path.join("runs", os.path.splitext(os.path.basename(FLAGS.config))[0])
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
    if launcher_rank() in (None, 0):  # rank 0 alone writes the workdir: it checks before training
        _own_workdir(cfg, workdir)
    _train(cfg, workdir)


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
