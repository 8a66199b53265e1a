"""A checkpoint folder's format, the part that needs no TensorFlow: its names and what its manifest may list.

One definition for the two places that read checkpoints: :mod:`hvdkeras.runtime.checkpointing` on a
workdir's disk, :mod:`hvdkeras.spark.common.publish` in a store::

    epoch-0003/                 after 3 epochs: ckpt.index, ckpt.data-*, meta.json, manifest.json (last)
    epoch-0003-batch-0041/      preempted after batch 41 of epoch 4
    damaged-epoch-0005-1/       found damaged, moved aside, kept

No TensorFlow here.
"""
from __future__ import annotations

import re
from typing import Any, Tuple

PREFIX = "ckpt"  # the TensorFlow checkpoint prefix inside a folder
META = "meta.json"  # where the folder is: its epoch and batch, and the run's metadata
MANIFEST = "manifest.json"  # every other file's size and SHA-256, written last
DAMAGED = "damaged-"  # the prefix of a folder set aside
NAME = re.compile(r"^epoch-(\d+)(?:-batch-(\d+))?$")


def position(name: str) -> Tuple[int, int]:
    """``(epoch, batch)`` of a checkpoint folder's name (``epoch-0003`` is (3, 0)).

    Raises:
        ValueError: not a checkpoint folder's name.
    """
    match = NAME.match(name)
    if match is None:
        raise ValueError(f"{name!r} is not a checkpoint folder's name (epoch-NNNN or epoch-NNNN-batch-NNNN)")
    return int(match.group(1)), int(match.group(2) or 0)


def folder_name(epoch: int, batch: int = 0) -> str:
    """The folder of the checkpoint after ``epoch`` epochs and ``batch`` more batches."""
    return f"epoch-{epoch:04d}" + (f"-batch-{batch:04d}" if batch else "")


def inside(rel: Any) -> bool:
    """Whether a manifest entry names a path inside its folder: a relative ``/``-separated string with no ``..``,
    ``.`` or empty part and no backslash (a store and a disk read the same entries)."""
    return (isinstance(rel, str) and not rel.startswith("/") and "\\" not in rel
            and all(part not in ("", ".", "..") for part in rel.split("/")))
