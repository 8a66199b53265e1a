"""Checkpoints on disk: atomic per-epoch directories, written by rank 0 only.

Layout under the checkpoint directory::

    epoch-0003/ckpt.index, ckpt.data-*, meta.json   # complete: safe to resume from
    .saving-XXXX/epoch-0004/                        # being written (ignored when reading)

A checkpoint is written into a hidden temporary directory and renamed into place
(:func:`hvdkeras.workdir.atomic_save`)
only once every file, ``meta.json`` last, is on disk. A rename is atomic, so a crash
at any moment leaves the previous checkpoints intact and never a half-written one
that looks complete. Old checkpoints beyond ``keep`` are removed after a new one
lands, never before.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from typing import Any, Dict, List, Optional

import tensorflow as tf

from hvdkeras import distributed
from hvdkeras.errors import CheckpointError
from hvdkeras.workdir import atomic_save, remove_tree

PREFIX = "ckpt"
META = "meta.json"
_NAME = re.compile(r"^epoch-(\d+)$")


@dataclasses.dataclass(frozen=True)
class CheckpointInfo:
    path: str
    epoch: int  # number of completed epochs it holds
    meta: Dict[str, Any]

    @property
    def prefix(self) -> str:
        return os.path.join(self.path, PREFIX)


class CheckpointStore:
    """The checkpoints of one run in ``directory``."""

    def __init__(self, directory: str, keep: int = 3):
        self.directory = directory
        self.keep = keep

    def _path(self, epoch: int) -> str:
        return os.path.join(self.directory, f"epoch-{epoch:04d}")

    def list(self) -> List[CheckpointInfo]:
        """Complete checkpoints, oldest first."""
        if not os.path.isdir(self.directory):
            return []
        found = []
        for name in os.listdir(self.directory):
            match = _NAME.match(name)
            meta_path = os.path.join(self.directory, name, META)
            if match and os.path.isfile(meta_path):
                try:
                    with open(meta_path) as f:
                        meta = json.load(f)
                except (OSError, ValueError):
                    continue  # unreadable metadata: not a usable checkpoint
                found.append(CheckpointInfo(os.path.join(self.directory, name), int(match.group(1)), meta))
        return sorted(found, key=lambda c: c.epoch)

    def latest(self) -> Optional[CheckpointInfo]:
        found = self.list()
        return found[-1] if found else None

    def save(self, epoch: int, trackable: tf.train.Checkpoint, meta: Dict[str, Any]) -> CheckpointInfo:
        """Writes ``trackable`` as the checkpoint after ``epoch`` completed epochs, atomically."""
        meta = dict(meta, epoch=epoch)

        def write(folder: str) -> None:
            os.makedirs(folder)
            trackable.write(os.path.join(folder, PREFIX))
            with open(os.path.join(folder, META), "w") as f:
                json.dump(meta, f, indent=1, sort_keys=True, default=float)

        final = self._path(epoch)
        atomic_save(final, write)
        self.prune()
        return CheckpointInfo(final, epoch, meta)

    def prune(self) -> None:
        """Removes the oldest complete checkpoints beyond ``keep``."""
        if self.keep > 0:
            for info in self.list()[:-self.keep]:
                remove_tree(info.path)

    def remove_stale(self) -> None:
        """Deletes temporary folders left by a crash during a save or a removal (call on one process only)."""
        if os.path.isdir(self.directory):
            for name in os.listdir(self.directory):
                if name.startswith((".saving-", ".deleting-", ".epoch-")):
                    shutil.rmtree(os.path.join(self.directory, name), ignore_errors=True)

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


def resume(store: CheckpointStore, trackable: tf.train.Checkpoint) -> Optional[CheckpointInfo]:
    """Collective: rank 0 loads the latest checkpoint; every rank learns which one.

    Returns the checkpoint's info on every rank (None when there is none). Only rank 0
    holds the loaded values afterwards: broadcast them (the broadcast callback does at
    the start of ``fit``). If rank 0 fails to load, every rank raises the same
    :class:`CheckpointError`, so no rank waits for a partner that has quit.
    """
    outcome: Any = None
    if distributed.is_chief():
        info = store.latest()
        try:
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
