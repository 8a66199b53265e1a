"""Checkpoints on disk: atomic folders, written by rank 0 only, verified before they are resumed.

Layout under the checkpoint directory::

    epoch-0003/ckpt.index, ckpt.data-*, meta.json, manifest.json   # after 3 epochs
    epoch-0003-batch-0041/...                  # preempted after batch 41 of epoch 4
    .saving-XXXX/epoch-0004/                   # being written (ignored when reading)
    damaged-epoch-0005-1/                      # found damaged on resume, moved aside, kept

A checkpoint is written into a hidden temporary directory and renamed into place
(:func:`hvdkeras.common.workdir.atomic_save`) only once every file is on disk:
``meta.json``, then ``manifest.json`` last, which lists every other file's size
and SHA-256. A rename is atomic, so a crash at any moment leaves the previous
checkpoints intact and never a half-written one that looks complete.

On resume the newest checkpoint whose files match its manifest is loaded; a damaged
one (a file missing, truncated or changed, no manifest, a manifest entry outside the
folder or a symbolic link, a folder name that is not the epoch and batch its
``meta.json`` records: renamed) is named in one warning line,
moved aside as ``damaged-...`` (never deleted) and the next newest tried. A save
that fails (a full disk, an I/O error) leaves the earlier checkpoints as they were
and raises :class:`~hvdkeras.common.errors.CheckpointError` with one line. Old checkpoints
beyond ``keep`` are removed after a new one lands, never before.
"""
from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

import tensorflow as tf

from hvdkeras.common import log
from hvdkeras.common.checkpoint_format import DAMAGED, MANIFEST, META, NAME, PREFIX, folder_name, inside
from hvdkeras.common.errors import CheckpointError
from hvdkeras.common.workdir import atomic_save, remove_staging, remove_tree
from hvdkeras.runtime import distributed

_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


@dataclasses.dataclass(frozen=True)
class CheckpointInfo:
    """One checkpoint folder: its path, the epochs (and batches of the next epoch) it holds, its metadata."""

    path: str
    epoch: int  # number of completed epochs it holds
    meta: Dict[str, Any]
    batch: int = 0  # batches of the next epoch it holds too (a mid-epoch checkpoint)

    @property
    def prefix(self) -> str:
        """The TensorFlow checkpoint prefix inside the folder (``<path>/ckpt``)."""
        return os.path.join(self.path, PREFIX)

    @property
    def position(self) -> Tuple[int, int]:
        """``(epoch, batch)``: training continues at batch ``batch`` of epoch index ``epoch``."""
        return self.epoch, self.batch

    def describe(self) -> str:
        """What the checkpoint holds, in words: ``epoch 3`` or ``epoch 3, batch 40 of epoch 4``."""
        return f"epoch {self.epoch}" + (f", batch {self.batch} of epoch {self.epoch + 1}" if self.batch else "")


def _digest(path: str) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def _files(folder: str) -> List[str]:
    """Every file under ``folder`` but the manifest, as paths relative to it, sorted (symbolic links included, not
    followed)."""
    found = []
    for root, dirs, names in os.walk(folder):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            rel = os.path.relpath(os.path.join(root, name), folder)
            if rel != MANIFEST:
                found.append(rel)
    return sorted(found)



def _position_problem(folder: str) -> Optional[str]:
    """What is wrong between the folder's name (``epoch-0003``, ``epoch-0003-batch-0041``) and the epoch and batch
    its ``meta.json`` records (None: they agree). A renamed checkpoint would otherwise resume somewhere else."""
    match = NAME.match(os.path.basename(os.path.normpath(folder)))
    if match is None:
        return None
    named = (int(match.group(1)), int(match.group(2) or 0))
    try:
        with open(os.path.join(folder, META)) as f:
            meta = json.load(f)
        recorded = (meta["epoch"], meta.get("batch", 0))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"{META} does not say where it is ({type(exc).__name__})"
    if recorded != named:
        return (f"its name says epoch {named[0]}, batch {named[1]}, but its {META} says epoch {recorded[0]},"
                f" batch {recorded[1]}: renamed")
    return None


def write_manifest(folder: str) -> None:
    """Writes ``manifest.json``: the size and SHA-256 of every other file in ``folder``."""
    entries = {}
    for rel in _files(folder):
        path = os.path.join(folder, rel)
        entries[rel] = {"size": os.path.getsize(path), "sha256": _digest(path)}
    with open(os.path.join(folder, MANIFEST), "w") as f:
        json.dump({"files": entries}, f, indent=1, sort_keys=True)


def verify(folder: str) -> Optional[str]:
    """What is wrong with the checkpoint in ``folder`` (None: its files match its manifest)."""
    try:
        with open(os.path.join(folder, MANIFEST)) as f:
            entries = json.load(f)["files"]
    except FileNotFoundError:
        return f"{MANIFEST} is missing"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"{MANIFEST} is unreadable ({type(exc).__name__})"
    if not isinstance(entries, dict):
        return f"{MANIFEST} is unreadable (its files are not a mapping)"
    for rel in sorted(entries, key=str):
        if not inside(rel):
            return f"{MANIFEST} lists {str(rel)[:80]!r}, outside its folder"
    for rel, want in sorted(entries.items()):
        path = os.path.join(folder, rel)
        if os.path.islink(path) or any(os.path.islink(os.path.join(folder, *rel.split("/")[:i]))
                                       for i in range(1, rel.count("/") + 1)):
            return f"{rel} is a symbolic link"
        if not os.path.isfile(path):
            return f"{rel} is missing"
        if not isinstance(want, dict) or not {"size", "sha256"} <= set(want):
            return f"{MANIFEST}'s entry for {rel} has no size and SHA-256"
        size = os.path.getsize(path)
        if size != want["size"]:
            return f"{rel} has {size} bytes, the manifest says {want['size']}"
        if _digest(path) != want["sha256"]:
            return f"{rel} does not match its SHA-256 in the manifest"
    extra = sorted(set(_files(folder)) - set(entries))
    if extra:
        return f"{extra[0]} is not in the manifest"
    return _position_problem(folder)


def mount_point(path: str) -> str:
    """The mount point of the filesystem holding ``path`` (or its nearest existing parent)."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    while not os.path.ismount(path):
        path = os.path.dirname(path)
    return path


def _no_space(exc: BaseException) -> bool:
    """True for an out-of-space error, as Python raises it or as TensorFlow reports it."""
    if isinstance(exc, OSError) and exc.errno in _NO_SPACE:
        return True
    text = str(exc).lower()
    return "no space left on device" in text or "disk quota exceeded" in text


class CheckpointStore:
    """The checkpoints of one run in ``directory``."""

    def __init__(self, directory: str, keep: int = 3):
        self.directory = directory
        self.keep = keep

    def _path(self, epoch: int, batch: int = 0) -> str:
        return os.path.join(self.directory, folder_name(epoch, batch))

    def list(self) -> List[CheckpointInfo]:
        """Checkpoints that look complete (their ``meta.json`` reads), oldest first; not yet verified."""
        if not os.path.isdir(self.directory):
            return []
        found = []
        for name in os.listdir(self.directory):
            match = NAME.match(name)
            meta_path = os.path.join(self.directory, name, META)
            if match and os.path.isfile(meta_path):
                try:
                    with open(meta_path) as f:
                        meta = json.load(f)
                except (OSError, ValueError):
                    meta = {"unreadable": True}  # verify() names the problem
                found.append(CheckpointInfo(os.path.join(self.directory, name), int(match.group(1)), meta,
                                            int(match.group(2) or 0)))
        return sorted(found, key=lambda c: c.position)

    def latest(self) -> Optional[CheckpointInfo]:
        """The newest checkpoint that looks complete (see :meth:`latest_intact` to resume)."""
        found = self.list()
        return found[-1] if found else None

    def latest_intact(self, warn: Callable[[str], None] = print) -> Optional[CheckpointInfo]:
        """The newest checkpoint whose files match its manifest (call on one process only).

        Each newer damaged one is reported by ``warn`` in one line and moved aside as
        ``damaged-<name>-<n>``, kept for inspection and out of the way of the saves to come.
        """
        for info in reversed(self.list()):
            problem = verify(info.path)
            if problem is None:
                return info
            aside = self._set_aside(info.path)
            warn(f"checkpoint {info.path} is damaged ({problem}); kept as {aside}, trying the one before it")
        return None

    def _set_aside(self, path: str) -> str:
        n = 1
        while os.path.exists(os.path.join(self.directory, f"{DAMAGED}{os.path.basename(path)}-{n}")):
            n += 1
        aside = os.path.join(self.directory, f"{DAMAGED}{os.path.basename(path)}-{n}")
        try:
            os.rename(path, aside)
        except OSError:
            return f"{path} (could not be moved aside)"
        return aside

    def save(self, epoch: int, trackable: tf.train.Checkpoint, meta: Dict[str, Any],
             batch: int = 0) -> CheckpointInfo:
        """Writes ``trackable`` as the checkpoint after ``epoch`` epochs and ``batch`` more batches, atomically.

        Raises :class:`CheckpointError` (one line naming the device and the checkpoint
        that is still intact) if the disk is full or the write fails otherwise.
        """
        meta = dict(meta, epoch=epoch, batch=batch)

        def write(folder: str) -> None:
            os.makedirs(folder)
            trackable.write(os.path.join(folder, PREFIX))
            with open(os.path.join(folder, META), "w") as f:
                json.dump(meta, f, indent=1, sort_keys=True, default=float)
            write_manifest(folder)

        final = self._path(epoch, batch)
        info = CheckpointInfo(final, epoch, meta, batch)
        try:
            atomic_save(final, write)
        except Exception as exc:  # noqa: BLE001  TensorFlow reports I/O errors in its own types
            raise self._save_error(info, exc) from None
        self.prune()
        return info

    def _save_error(self, info: CheckpointInfo, exc: BaseException) -> CheckpointError:
        previous = [c for c in self.list() if c.position < info.position]
        intact = f"{previous[-1].describe()} is intact" if previous else "no earlier checkpoint exists"
        what = f"checkpoint {info.describe()}"
        if _no_space(exc):
            return CheckpointError(f"no space left on {mount_point(self.directory)} while writing {what}; {intact}"
                                   " (free space or point --workdir elsewhere, then rerun to resume)")
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return CheckpointError(f"cannot write {what} in {self.directory} ({first}); {intact}")

    def prune(self) -> None:
        """Removes the oldest complete checkpoints beyond ``keep`` (the ``damaged-`` ones are never touched)."""
        if self.keep > 0:
            for info in self.list()[:-self.keep]:
                remove_tree(info.path)

    def remove_stale(self) -> None:
        """Deletes temporary folders left by a crash during a save or a removal (call on one process only)."""
        remove_staging(self.directory)

    @staticmethod
    def restore(info: CheckpointInfo, trackable: tf.train.Checkpoint) -> None:
        """Loads ``info`` into ``trackable``; every variable of the model and optimizer must match."""
        try:
            trackable.read(info.prefix).assert_existing_objects_matched()
        except (AssertionError, ValueError, tf.errors.OpError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CheckpointError(
                f"checkpoint {info.path} does not fit this model and optimizer ({first[:300]}); "
                "use a new --workdir, or the config that wrote it"
            ) from None


def next_position(epoch: int, batch: int, steps_per_epoch: int) -> Tuple[int, int]:
    """Where training continues after ``batch`` batches of epoch index ``epoch``: ``(epoch, batch)``, or
    ``(epoch + 1, 0)`` when those batches complete the epoch, also when an epoch now has fewer steps than were
    done of it (an elastic world that grew, a checkpoint resumed at another world size)."""
    if batch >= steps_per_epoch:
        return epoch + 1, 0
    return epoch, batch


def resume(store: CheckpointStore, trackable: tf.train.Checkpoint) -> Optional[CheckpointInfo]:
    """Collective: rank 0 loads the latest checkpoint; every rank learns which one.

    Returns the checkpoint's info on every rank (None when there is none). Only rank 0
    holds the loaded values afterwards: broadcast them (the broadcast callback does at
    the start of ``fit``). If rank 0 fails to load, every rank raises the same
    :class:`CheckpointError`, so no rank waits for a partner that has quit.
    """
    outcome: Any = None
    if distributed.is_chief():
        try:
            info = store.latest_intact(warn=log.warning)
            if info is not None:
                store.restore(info, trackable)
            outcome = info
        except CheckpointError as exc:
            outcome = exc
    outcome = distributed.broadcast_object(outcome, name="hvdkeras.resume")
    if isinstance(outcome, Exception):
        raise CheckpointError(str(outcome))
    return outcome


def trackable_for(model) -> tf.train.Checkpoint:
    """What a checkpoint holds: the model's variables and its optimizer's (slots, step, rate)."""
    return tf.train.Checkpoint(model=model, optimizer=model.optimizer)
