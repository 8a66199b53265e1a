"""A run's folder: the names of the files in it, the one atomic write, and the one ``metrics.jsonl`` reader.

Everything in a workdir is written by rank 0 only::

    <workdir>/config.yaml        the resolved config (defaults, file, --set, host choices)
    <workdir>/metrics.jsonl      one JSON object per epoch (hvdkeras.callbacks.JsonlMetricsLogger)
    <workdir>/checkpoints/       epoch-NNNN/ folders (hvdkeras.runtime.checkpointing)
    <workdir>/tensorboard/       event files, with trainer.tensorboard: true
    <workdir>/estimator/         the Estimator API's model_dir (trainer.api: estimator)
    <workdir>/report.png         python -m hvdkeras.report
    <workdir>/export/            the model to ship (hvdkeras.runtime.export)

Every atomic write stages in a ``.saving-*`` folder beside its target, and a removal renames
into a ``.deleting-*`` one first: a process killed in between leaves that folder behind, and
:func:`remove_staging` is how the next job on the workdir clears it
(:func:`hvdkeras.common.workdir_guard.remove_staging` names the places).

No TensorFlow here: the report and the tests read runs through this module alone.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import socket
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
EXPORT_DIR = "export"
LOGS_DIR = "logs"  # a rank's output after its launcher went
# The names an atomic write or a removal gives its temporary folder (``.epoch-``: an older version's saves).
STAGING_PREFIXES = (".saving-", ".deleting-", ".epoch-")


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

    @property
    def export(self) -> str:
        """The run's ``export/`` folder (:mod:`hvdkeras.runtime.export`)."""
        return os.path.join(self.path, EXPORT_DIR)

    def after_launcher(self) -> str:
        """Where this process's output goes once its launcher has gone (:mod:`hvdkeras.common.launcher_watch`):
        ``<workdir>/logs/after-launcher-<host>-<pid>.log``."""
        return os.path.join(self.path, LOGS_DIR, f"after-launcher-{socket.gethostname()}-{os.getpid()}.log")


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


def is_staging(name: str) -> bool:
    """Whether ``name`` (a file or folder name, not a path) is an atomic write's or a removal's temporary folder."""
    return name.startswith(STAGING_PREFIXES)


def remove_staging(folder: str) -> List[str]:
    """Clears the temporary folders that atomic writes and removals left in ``folder`` (not below it); their names.

    A staging folder whose write had committed (:func:`atomic_save`: its files were all on disk and
    the move into place had begun) is finished first, so its target holds the new version whole,
    unless the target is newer than that commit; any other is deleted, and its target keeps the old
    version. Only for a folder no live process writes in: the caller holds the workdir's lock
    (:func:`hvdkeras.common.workdir_guard.remove_staging`) or is the checkpoints' one writer. A
    missing folder has none; a symbolic link is removed as a link, never followed.
    """
    try:
        names = sorted(n for n in os.listdir(folder) if is_staging(n))
    except (FileNotFoundError, NotADirectoryError):
        return []
    for name in names:
        path = os.path.join(folder, name)
        if os.path.islink(path) or not os.path.isdir(path):
            with contextlib.suppress(OSError):
                os.remove(path)
            continue
        target = _committed_target(path)
        if target is not None and not _newer_than_commit(os.path.join(folder, target), path):
            with contextlib.suppress(OSError):
                _move_into_place(path, folder, target)
                fsync_dir(folder)
        shutil.rmtree(path, ignore_errors=True)
    return names


_COMMITTED = ".committed"  # in a staging folder: the target's name, written once every file is on disk


def _committed_target(staging: str) -> Optional[str]:
    """The name of the target a staging folder had committed to (None: it had not, or the marker is not one)."""
    marker = os.path.join(staging, _COMMITTED)
    if os.path.islink(marker):
        return None
    try:
        with open(marker, "rb") as f:
            name = f.read(4096).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    plain = name and name not in (".", "..") and "/" not in name and "\\" not in name and "\0" not in name
    return name if plain and not is_staging(name) else None


def _newer_than_commit(target: str, staging: str) -> bool:
    """Whether ``target`` (a file, a folder, or a weights prefix's index) was written after ``staging`` committed: a
    later save landed, and the leftover is older than what is there."""
    committed = os.stat(os.path.join(staging, _COMMITTED)).st_mtime_ns
    for candidate in (target, target + ".index"):
        if os.path.lexists(candidate) and os.lstat(candidate).st_mtime_ns > committed:
            return True
    return False


def _move_into_place(staging: str, directory: str, base: str) -> None:
    """Moves what ``staging`` holds for target ``base`` into ``directory``: one file or folder by one rename (an old
    folder moved aside first), or a TensorFlow weights prefix's files, data first and index last. Safe to run
    again on what a killed run of it left: each step looks at what is still in ``staging``."""
    path, tmp = os.path.join(directory, base), os.path.join(staging, base)
    if os.path.lexists(tmp):  # one file or one folder
        if os.path.isdir(path) and not os.path.islink(path):
            os.rename(path, tempfile.mkdtemp(prefix=".old-", dir=staging))
        os.replace(tmp, path)
        return
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


def atomic_save(path: str, save: Callable[[str], Any]) -> None:
    """Calls ``save(tmp_path)`` beside ``path``, syncs it to disk, then moves it into place by rename.

    Readers see the old ``path`` or the complete new one, never a part. ``save`` may
    write one file, a folder, or a TensorFlow weights prefix (``path.index`` plus
    ``path.data-*``, maybe a ``checkpoint`` pointer file): a prefix is moved data
    files first and index last, since readers find it through its index. Temporary
    names start with ``.saving-``; on any error they are removed and ``path`` is
    left as it was. Once every file is on disk the staging folder records its
    target (the commit): a process killed after that leaves a write that
    :func:`remove_staging` finishes, one killed before it one that it deletes.
    """
    directory = os.path.dirname(os.path.abspath(path))
    base = os.path.basename(path)
    os.makedirs(directory, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".saving-", dir=directory)
    try:
        save(os.path.join(staging, base))
        _fsync_tree(staging)
        with open(os.path.join(staging, _COMMITTED), "w") as f:
            f.write(base)
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(staging)
        _move_into_place(staging, directory, base)
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

    A missing file has no records. A line cut short by a crash, or torn into bytes that are not
    UTF-8, is not a record: the file is read as bytes and each line decoded on its own.
    """
    if not os.path.exists(path):
        return [], 0
    records, skipped = [], 0
    with open(path, "rb") as f:
        for raw in f:
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError):
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
