"""A run's folder: the names of the files in it, the one atomic write, and the one ``metrics.jsonl`` reader.

Everything in a workdir is written by rank 0 only::

    <workdir>/config.yaml        the resolved config (defaults, file, --set, host choices)
    <workdir>/metrics.jsonl      one JSON object per epoch (hvdkeras.callbacks.JsonlMetricsLogger)
    <workdir>/checkpoints/       epoch-NNNN/ folders (hvdkeras.runtime.checkpointing)
    <workdir>/tensorboard/       event files, with trainer.tensorboard: true
    <workdir>/estimator/         the Estimator API's model_dir (trainer.api: estimator)
    <workdir>/report.png         python -m hvdkeras.report

No TensorFlow here: the report and the tests read runs through this module alone.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from hvdkeras.common.errors import SetupError
from hvdkeras.config import to_yaml

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
CHECKPOINT_DIR = "checkpoints"
TENSORBOARD_DIR = "tensorboard"
ESTIMATOR_DIR = "estimator"
REPORT_FILE = "report.png"


@dataclasses.dataclass(frozen=True)
class Workdir:
    """The paths of one run's files under ``path``."""

    path: str

    @property
    def config(self) -> str:
        """The run's ``config.yaml``."""
        return os.path.join(self.path, CONFIG_FILE)

    @property
    def metrics(self) -> str:
        """The run's ``metrics.jsonl``."""
        return os.path.join(self.path, METRICS_FILE)

    @property
    def checkpoints(self) -> str:
        """The run's ``checkpoints/`` folder."""
        return os.path.join(self.path, CHECKPOINT_DIR)

    @property
    def tensorboard(self) -> str:
        """The run's ``tensorboard/`` folder."""
        return os.path.join(self.path, TENSORBOARD_DIR)

    @property
    def estimator(self) -> str:
        """The run's ``estimator/`` folder (the Estimator API's model directory)."""
        return os.path.join(self.path, ESTIMATOR_DIR)

    @property
    def report(self) -> str:
        """The run's ``report.png``."""
        return os.path.join(self.path, REPORT_FILE)


# --------------------------------------------------------------------------- writing


def check_writable(path: str) -> None:
    """Raises :class:`SetupError` (one line) unless this process can write ``path``'s files.

    Checks the folder and its ``checkpoints/`` where they exist; where ``path`` does not
    exist yet, the nearest folder above it, in which training will create it. Creates
    nothing: a run that then fails on its config leaves no empty workdir behind. Rank 0
    calls it before training starts.
    """
    if os.path.exists(path) and not os.path.isdir(path):
        raise SetupError(f"--workdir {path} is a file, not a folder; pass a folder, e.g. --workdir runs/myjob")
    checkpoints = Workdir(path).checkpoints
    if os.path.exists(checkpoints) and not os.path.isdir(checkpoints):
        raise SetupError(f"{checkpoints} is a file, not a folder; remove it or pass another --workdir")
    folders = [f for f in (path, checkpoints) if os.path.isdir(f)]
    if not folders:
        above = os.path.dirname(os.path.abspath(path))
        while not os.path.exists(above):
            above = os.path.dirname(above)
        if not os.path.isdir(above):
            raise SetupError(f"cannot create --workdir {path}: {above} is a file, not a folder; pass another --workdir")
        folders = [above]
    for folder in folders:
        try:
            fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=folder)
            os.close(fd)
            os.remove(probe)
        except OSError as exc:
            raise SetupError(f"cannot write in {folder} ({exc.strerror or exc}); pass a writable --workdir or"
                             " fix its permissions") from None


def fsync_dir(path: str) -> None:
    """Flushes a folder's entries (a rename or new file in it) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: str) -> None:
    for root, _, files in os.walk(path):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                os.fsync(f.fileno())
        fsync_dir(root)


def remove_tree(path: str) -> None:
    """Deletes a file or folder by first renaming it aside, so no reader sees it half deleted."""
    if os.path.isdir(path):
        doomed = tempfile.mkdtemp(prefix=".deleting-", dir=os.path.dirname(os.path.abspath(path)))
        os.rename(path, os.path.join(doomed, "old"))
        shutil.rmtree(doomed, ignore_errors=True)
    elif os.path.exists(path):
        os.remove(path)


def atomic_save(path: str, save: Callable[[str], Any]) -> None:
    """Calls ``save(tmp_path)`` beside ``path``, syncs it to disk, then moves it into place by rename.

    Readers see the old ``path`` or the complete new one, never a part. ``save`` may
    write one file, a folder, or a TensorFlow weights prefix (``path.index`` plus
    ``path.data-*``, maybe a ``checkpoint`` pointer file): a prefix is moved data
    files first and index last, since readers find it through its index. Temporary
    names start with ``.saving-``; on any error they are removed and ``path`` is
    left as it was.
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".saving-", dir=directory)
    try:
        tmp = os.path.join(staging, os.path.basename(path))
        save(tmp)
        _fsync_tree(staging)
        if os.path.exists(tmp):  # one file or one folder
            if os.path.isdir(path):
                os.rename(path, os.path.join(staging, ".old"))
            os.replace(tmp, path)
        else:  # a TensorFlow weights prefix: several files
            base = os.path.basename(path)
            names = sorted(os.listdir(staging), key=lambda n: (n == "checkpoint", n.endswith(".index"), n))
            for name in names:
                if not (name.startswith(base) or name == "checkpoint"):
                    continue
                if name == "checkpoint":  # TensorFlow's pointer file: point it at the final prefix
                    pointer = os.path.join(staging, name)
                    with open(pointer) as f:
                        text = f.read().replace(staging + os.sep, "").replace(staging, directory)
                    with open(pointer, "w") as f:
                        f.write(text)
                os.replace(os.path.join(staging, name), os.path.join(directory, name))
        fsync_dir(directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def atomic_write(path: str, text: str) -> None:
    """Writes ``text`` to ``path`` atomically (see :func:`atomic_save`)."""

    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            f.write(text)

    atomic_save(path, write)


def save_config(cfg: Any, path: str, auto: Optional[Mapping[str, str]] = None, footer: Sequence[str] = ()) -> None:
    """Writes the resolved config (a :class:`hvdkeras.config.Config`) as YAML to ``path``, atomically.

    ``auto`` and ``footer``: see :func:`hvdkeras.config.to_yaml` (the values chosen for the user, with why).
    """
    atomic_write(path, to_yaml(cfg, auto, footer))


# --------------------------------------------------------------------------- metrics.jsonl


def read_metrics_counting(path: str) -> Tuple[List[Dict[str, Any]], int]:
    """(the JSON objects of a ``metrics.jsonl``, oldest first; how many lines were not one).

    A missing file has no records. A line cut short by a crash is not a record.
    """
    if not os.path.exists(path):
        return [], 0
    records, skipped = [], 0
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if isinstance(record, dict):
                records.append(record)
            else:
                skipped += 1
    return records, skipped


def read_metrics(path: str) -> List[Dict[str, Any]]:
    """The records of a ``metrics.jsonl`` file, oldest first (see :func:`read_metrics_counting`)."""
    return read_metrics_counting(path)[0]


def append_metrics(path: str, record: Dict[str, Any]) -> None:
    """Appends one record as a line, flushed and synced to disk; never through a symbolic link at ``path`` (an
    OSError, ELOOP, instead)."""
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644), "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def keep_metrics_through(path: str, epoch: int) -> None:
    """Drops the records of epochs after ``epoch`` (logged before a crash, not checkpointed), atomically."""
    records, skipped = read_metrics_counting(path)
    kept = [r for r in records if r.get("epoch", 0) <= epoch]
    if len(kept) != len(records) or skipped:
        atomic_write(path, "".join(json.dumps(r) + "\n" for r in kept))
