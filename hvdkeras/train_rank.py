"""What each rank of ``python -m hvdkeras.train`` does, whatever started it: rank 0 owns the workdir, then every
rank trains with the API its config names.

:mod:`hvdkeras.train` calls it with its flags; ``--launcher ray`` sends :func:`rank` to each rank's Ray actor with
the same values as arguments (no flags are defined here, so the actors import it beside nothing else of the command
line).
"""
from __future__ import annotations

import os
import sys
from typing import Sequence

from hvdkeras import config as config_lib
from hvdkeras.common import processes, workdir_guard
from hvdkeras.common.errors import SetupError
from hvdkeras.common.horovod_env import launcher_rank
from hvdkeras.common.workdir import check_writable


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


def train(cfg: config_lib.Config, workdir: str) -> None:
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


CLAIM = None  # rank 0's lock on the workdir, held until the process ends


def own_workdir(cfg: config_lib.Config, workdir: str, fresh: bool, resume: str) -> None:
    """Rank 0, before training: the workdir is writable, this job's alone (hvdkeras.common.workdir_guard), cleared of
    the unfinished writes a killed job left, and holds
    no other training's checkpoints, by config or by stack (or --fresh moves them aside, or --resume=force takes
    them as they are where this stack can load them)."""
    global CLAIM
    check_writable(workdir)
    CLAIM = workdir_guard.claim(workdir)
    left = workdir_guard.remove_staging(workdir, CLAIM)  # a killed writer's, before this job writes anything
    if left:
        print(f"[hvdkeras] removed {len(left)} unfinished write{'s' if len(left) > 1 else ''} a stopped job left"
              f" in {workdir} ({', '.join(os.path.relpath(p, workdir) for p in left[:3])}"
              f"{', ...' if len(left) > 3 else ''})", flush=True)
    if fresh:
        moved = workdir_guard.start_over(workdir)
        if moved:
            print(f"[hvdkeras] --fresh: the previous run in {workdir} moved to {moved}", flush=True)
    elif resume == "force":
        changed = workdir_guard.forced_changes(workdir, cfg)
        if changed:
            print(f"[hvdkeras] --resume=force: resuming from checkpoints trained with {'; '.join(changed)}",
                  file=sys.stderr, flush=True)
    workdir_guard.check_resumable(workdir, cfg, fresh, resume)


def rank(config_path: str, overrides: Sequence[str], workdir: str, fresh: bool, resume: str) -> None:
    """A rank from its arguments alone, as ``--launcher ray`` sends it to each Ray actor (Horovod's settings in its
    environment): rank 0 owns the workdir, then every rank trains."""
    cfg = config_lib.load(config_path, list(overrides))
    if launcher_rank() in (None, 0):
        own_workdir(cfg, workdir, fresh, resume)
    train(cfg, workdir)
