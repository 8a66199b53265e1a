"""A workdir belongs to one job: rank 0's lock, the training its checkpoints hold, and starting over.

Rank 0 calls these before anything is trained (``python -m hvdkeras.train`` does):

* :func:`claim` locks ``<workdir>/.hvdkeras.lock`` (``fcntl.flock``) for the whole run and writes
  the holder into it (host, pid, start time). The kernel releases the lock when the process
  ends however it ends, so a crashed run never leaves a workdir locked. A second job on the
  workdir stops with one line naming the holder. The lock is as good as the filesystem's
  ``flock``: local disks and most network filesystems of one host; across hosts only where
  the filesystem supports it (NFSv4, Lustre with ``flock``).
* :func:`changed_training` compares the config with the workdir's ``config.yaml`` when the
  workdir holds checkpoints: a key in :data:`TRAINING_KEYS` (the model, the data, the optimizer,
  the schedule, the batch, the loss, the seed) that differs would resume one training with
  another's weights, so :func:`check_same_training` refuses it in one line listing the keys.
  Launcher and bookkeeping keys (the number of ranks, threads, epochs, checkpoint and Horovod
  settings but the gradient accumulation) may change. The stack is part of what trained the
  checkpoints too (TensorFlow's, Keras' and Horovod's versions, which ``config.yaml`` records:
  :mod:`hvdkeras.common.stack`): a run on another stack is refused in one line naming both stacks,
  and ``--resume=force`` (:func:`forced_changes`) is refused too where the checkpoint format
  differs (Keras 2 against Keras 3).
* :func:`remove_staging` clears what a killed writer left: the ``.saving-*`` and ``.deleting-*`` folders
  of atomic writes and removals (:func:`hvdkeras.common.workdir.atomic_save`) in every folder they stage
  in, once the claim holds the lock and before anything is written.
* :func:`start_over` (``--fresh``) moves the run's files into ``<workdir>/previous/<time>/`` and
  deletes nothing.

No TensorFlow, no Horovod: only files.
"""
from __future__ import annotations

import atexit
import fcntl
import os
import socket
import time
from typing import Any, Dict, List, Optional

import yaml

from hvdkeras.common import stack as stack_lib
from hvdkeras.common import workdir as workdir_lib
from hvdkeras.common.errors import ConfigError, SetupError
from hvdkeras.common.horovod_env import launcher_job
from hvdkeras.common.stack import Stack
from hvdkeras.common.workdir import (
    CHECKPOINT_DIR,
    CONFIG_FILE,
    ESTIMATOR_DIR,
    EXPORT_DIR,
    LOGS_DIR,
    METRICS_FILE,
    REPORT_FILE,
    TENSORBOARD_DIR,
    Workdir,
)
from hvdkeras.config import Config, safe_yaml, to_dict

LOCK_FILE = ".hvdkeras.lock"
PREVIOUS_DIR = "previous"
RUN_FILES = (CONFIG_FILE, METRICS_FILE, CHECKPOINT_DIR, TENSORBOARD_DIR, ESTIMATOR_DIR, EXPORT_DIR)

# What a checkpoint's weights were trained with: a resume with any of these changed is refused (section: every
# key of the section; section.key: that key alone).
TRAINING_KEYS = (
    "model", "optimizer", "schedule",
    "data.name", "data.args", "data.global_batch_size", "data.per_rank_batch_size", "data.validation_fraction",
    "data.image_shape", "data.num_classes", "data.train_examples", "data.train_split", "data.pipeline",
    "data.shuffle_buffer",
    "trainer.api", "trainer.steps_per_epoch", "trainer.loss", "trainer.loss_weights", "trainer.label_smoothing",
    "horovod.backward_passes_per_step", "horovod.average_aggregated_gradients",
    "runtime.seed", "runtime.mixed_precision",
)


CLAIM_ATTEMPTS = 20


def _same_file(fd: int, path: str) -> bool:
    """Whether ``path`` is still the file open as ``fd`` (it may have been removed, or replaced, since)."""
    try:
        here, there = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


class Claim:
    """Rank 0's hold on a workdir: the open, locked lock file; :meth:`release` (also at exit) gives it up."""

    def __init__(self, path: str, fd: Optional[int], created: bool = False):
        self.path = path
        self._fd = fd
        self._created = created
        if fd is not None:
            atexit.register(self.release)

    @property
    def held(self) -> bool:
        """Whether the claim still holds the lock file."""
        return self._fd is not None

    def release(self) -> None:
        """Removes the lock file while still holding it, then unlocks it (the kernel would unlock it at exit
        anyway); a workdir the claim created and nothing was written into goes too. A job that opened the file
        before it went and locks it afterwards finds it is no longer the workdir's (:func:`claim` checks), so two
        jobs never both hold the lock."""
        if self._fd is None:
            return
        try:
            os.remove(os.path.join(self.path, LOCK_FILE))
            if self._created and not os.listdir(self.path):
                os.rmdir(self.path)
        except OSError:
            pass
        os.close(self._fd)
        self._fd = None


def holder_line() -> str:
    """Who holds a workdir: this job (when a launcher started it), host, pid, start time."""
    job = launcher_job()
    return (f"job {job}, " if job else "") + (f"host {socket.gethostname()}, pid {os.getpid()},"
                                              f" started {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")


def claim(path: str) -> Claim:
    """Locks workdir ``path`` for this process (creating the folder); a :class:`SetupError` naming the holder
    if another job holds it.

    A process of the job that holds the lock gets a claim that holds nothing: in an elastic job a
    worker added later can be rank 0 while the first rank 0 still runs.
    """
    lock_path = os.path.join(path, LOCK_FILE)
    for _ in range(CLAIM_ATTEMPTS):
        # A job that ends removes the workdir it created when nothing was written there: between this job's
        # making the folder and opening the lock file in it, the folder can go (then both are tried again).
        created = not os.path.isdir(path)
        try:
            os.makedirs(path, exist_ok=True)
        except FileExistsError:
            if os.path.lexists(path) and not os.path.isdir(path):
                raise SetupError(f"--workdir {path} is a file, not a folder: pass another --workdir") from None
            continue  # it was there, and went as it was looked at
        planted = [name for name in (LOCK_FILE, PREVIOUS_DIR, LOGS_DIR, REPORT_FILE) + RUN_FILES
                   if os.path.islink(os.path.join(path, name))]
        if planted:
            raise SetupError(f"--workdir {path} holds {planted[0]} as a symbolic link, which the run would write"
                             " through; remove it (a run writes only files and folders of its own there)")
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except FileNotFoundError:
            continue  # the folder went after it was made
        except OSError as exc:
            why = exc.strerror or exc
            raise SetupError(f"--workdir {path}: cannot open its lock file {LOCK_FILE} ({why})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 4096).decode(errors="replace").strip() or "a process that has not said who it is"
            os.close(fd)
            job = launcher_job()
            if job is not None and holder.startswith(f"job {job},"):
                return Claim(path, None)
            raise SetupError(f"--workdir {path} is in use by another job ({holder}): wait for it to end, stop it, or"
                             " pass another --workdir") from None
        if _same_file(fd, lock_path):
            break
        os.close(fd)  # locked a lock file its holder removed as it ended: the workdir's is a new one
    else:
        raise SetupError(f"--workdir {path}: its lock file kept changing under {CLAIM_ATTEMPTS} attempts to lock it;"
                         " another job is starting and ending there: wait, or pass another --workdir")
    os.ftruncate(fd, 0)
    os.write(fd, (holder_line() + "\n").encode())
    os.fsync(fd)
    return Claim(path, fd, created)


def flat(tree: Any, prefix: str = "") -> Dict[str, Any]:
    """A config tree (a ``config.yaml`` read, or ``to_dict``'s) as ``{"section.key": value}``; ``model.args``,
    ``data.args`` and the mappings by output name (``trainer.loss``, ``trainer.metrics``, ``trainer.loss_weights``)
    stay whole."""
    found: Dict[str, Any] = {}
    for key, value in (tree or {}).items():
        if isinstance(value, dict) and key not in ("args", "loss", "metrics", "loss_weights"):
            found.update(flat(value, f"{prefix}{key}."))
        else:
            found[f"{prefix}{key}"] = value
    return found


def _is_training_key(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in TRAINING_KEYS)


def _holds_checkpoints(path: str) -> bool:
    checkpoints = Workdir(path).checkpoints
    return os.path.isdir(checkpoints) and bool(os.listdir(checkpoints))


def changed_training(path: str, cfg: Config) -> List[str]:
    """``key: old -> new`` for each training key the config changes against the checkpoints in workdir ``path``
    (none when it holds no checkpoints or no ``config.yaml``, or a key is missing from it: an older version's)."""
    files = Workdir(path)
    if not (_holds_checkpoints(path) and os.path.exists(files.config)):
        return []
    try:
        with open(files.config) as f:
            stored = flat(safe_yaml.load(f))
    except (OSError, yaml.YAMLError, ValueError, RecursionError, AttributeError):
        return []
    changed = []
    for key, value in flat(to_dict(cfg)).items():
        if _is_training_key(key) and key in stored and stored[key] != value:
            changed.append(f"{key}: {stored[key]!r} -> {value!r}")
    return changed


def trained_stack(path: str) -> Optional[Stack]:
    """The stack that trained the checkpoints in workdir ``path`` (recorded in its ``config.yaml``); None when it
    holds no checkpoints or records no stack (an older version's workdir)."""
    if not _holds_checkpoints(path):
        return None
    try:
        with open(Workdir(path).config) as f:
            return Stack.from_config_text(f.read())
    except OSError:
        return None


def other_stack(path: str, running: Optional[Stack] = None) -> Optional[Stack]:
    """The stack that trained workdir ``path``'s checkpoints when it is not ``running`` (default: this
    interpreter's, :func:`hvdkeras.common.stack.current`); else None."""
    trained = trained_stack(path)
    running = running or stack_lib.current()
    return trained if trained is not None and trained != running else None


def _stack_text(trained: Stack, running: Stack) -> str:
    return f"on another stack ({trained.describe()}; this is {running.describe()})"


def _fresh(path: str) -> str:
    return f"--fresh to start over (the old run moves to {os.path.join(path, PREVIOUS_DIR)}/)"


def _no_force(trained: Stack, running: Stack) -> str:
    return (f"--resume=force cannot help: Keras {trained.keras_major}'s checkpoints do not load in"
            f" Keras {running.keras_major}")


def check_same_training(path: str, cfg: Config, training: bool = True, running: Optional[Stack] = None) -> None:
    """Refuses (one line) a config whose training keys differ from the one the workdir's checkpoints were
    trained with, or a stack other than the one that trained them (``running``, default this interpreter's);
    the line names the ways out of a training run, or of an evaluation when not ``training``."""
    changed = changed_training(path, cfg)
    running = running or stack_lib.current()
    trained = other_stack(path, running)
    if not changed and trained is None:
        return
    config = Workdir(path).config
    if trained is None:
        what = f"with another config ({'; '.join(changed)})"
        if training:
            way_out = (f"rerun with the config it was started with ({config}), pass {_fresh(path)}, or --resume=force"
                       " to continue from its weights anyway")
        else:
            way_out = f"evaluate with the config it was trained with ({config})"
    else:
        what = (f"with another config ({'; '.join(changed)}) " if changed else "") + _stack_text(trained, running)
        if not training:
            way_out = f"evaluate on the stack that trained it ({trained.describe()})"
        elif stack_lib.checkpoints_carry_over(trained, running):
            way_out = f"pass another --workdir, {_fresh(path)}, or --resume=force to continue from its weights anyway"
        else:
            way_out = f"pass another --workdir or {_fresh(path)}; {_no_force(trained, running)}"
    raise ConfigError(f"--workdir {path} holds checkpoints trained {what}: {way_out}")


def check_resumable(path: str, cfg: Config, fresh: bool, resume: str) -> None:
    """The check every launcher makes before a run resumes workdir ``path``: :func:`check_same_training` unless
    ``fresh`` (the old run moves aside) or ``resume == "force"`` (its checkpoints are taken as they are), and only
    where the workdir exists.

    Args:
        path: the run's ``--workdir``.
        cfg: the config this run trains with.
        fresh: ``--fresh`` was passed.
        resume: ``--resume``'s value, ``"auto"`` or ``"force"``.
    """
    if not fresh and resume != "force" and os.path.isdir(path):
        check_same_training(path, cfg)


def forced_changes(path: str, cfg: Config, running: Optional[Stack] = None) -> List[str]:
    """``--resume=force``: what differs from the training of workdir ``path``'s checkpoints (config keys as in
    :func:`changed_training`, then the stack); a :class:`ConfigError` when they were trained on a stack whose
    checkpoints this one cannot load."""
    running = running or stack_lib.current()
    changed = changed_training(path, cfg)
    trained = other_stack(path, running)
    if trained is None:
        return changed
    if not stack_lib.checkpoints_carry_over(trained, running):
        raise ConfigError(f"--workdir {path} holds checkpoints trained {_stack_text(trained, running)}:"
                          f" {_no_force(trained, running)}; pass another --workdir or {_fresh(path)}")
    return changed + [f"stack: {trained.describe()} -> {running.describe()}"]


def staging_places(path: str) -> List[str]:
    """Every folder of workdir ``path`` an atomic write stages in: its top, ``checkpoints/``, ``export/``,
    ``previous/`` and, in each earlier run kept there, the same three (``--fresh`` moved them as they were)."""
    runs = [path]
    previous = os.path.join(path, PREVIOUS_DIR)
    if os.path.isdir(previous) and not os.path.islink(previous):
        runs += [os.path.join(previous, n) for n in sorted(os.listdir(previous))
                 if not workdir_lib.is_staging(n) and os.path.isdir(os.path.join(previous, n))
                 and not os.path.islink(os.path.join(previous, n))]
    places = []
    for run in runs:
        files = Workdir(run)
        places += [run, files.checkpoints, files.export]
    return places[:3] + [previous] + places[3:]


def remove_staging(path: str, held: Claim) -> List[str]:
    """Deletes the staging folders killed writers left in workdir ``path`` (:func:`staging_places`); their paths.

    Only with ``held``, a claim that holds the workdir's lock: then no other job writes there, and this
    job has written nothing yet. A claim that holds nothing (a later rank 0 of an elastic job whose first
    still runs) removes nothing: that writer may be live.
    """
    if not held.held:
        return []
    removed = []
    for place in staging_places(path):
        removed += [os.path.join(place, name) for name in workdir_lib.remove_staging(place)]
    return removed


def start_over(path: str) -> Optional[str]:
    """Moves the run's files in workdir ``path`` into ``<path>/previous/<time>/`` (deleting nothing);
    returns that folder, or None when there was nothing to move."""
    present = [name for name in RUN_FILES if os.path.exists(os.path.join(path, name))]
    if not present:
        return None
    target = os.path.join(path, PREVIOUS_DIR, time.strftime("%Y%m%d-%H%M%S"))
    suffix = 1
    while os.path.exists(target):
        suffix += 1
        target = os.path.join(path, PREVIOUS_DIR, time.strftime("%Y%m%d-%H%M%S") + f"-{suffix}")
    os.makedirs(target)
    for name in present:
        os.rename(os.path.join(path, name), os.path.join(target, name))
    return target
