"""A run's files between rank 0's local folder and the store: fetched before training, published after each save.

The ranks of a Spark estimator's ``fit`` train in a local folder each (a temporary folder on
the executor), never in the store: checkpoints there are written as on any disk, atomically
(:mod:`hvdkeras.runtime.checkpointing`), and the store may be an object store, which has no
atomic rename. Rank 0 mirrors its run to the store's run folder with a :class:`RunMirror`:

* :meth:`RunMirror.fetch`, before training: the store's newest *trusted* checkpoint, its
  ``metrics.jsonl`` and ``config.yaml`` are downloaded into the local folder, where the
  trainer's own resume finds them;
* :meth:`RunMirror.publish`, after each checkpoint lands locally: each new ``epoch-NNNN/``
  folder is uploaded to ``<run>/checkpoints/epoch-NNNN/``, its ``manifest.json`` last, then
  ``metrics.jsonl`` and ``config.yaml``; then the store's checkpoints beyond ``keep`` are
  removed, oldest first, manifest first.

The model Horovod's ``checkpoint_callback`` keeps (a ``BestModelCheckpoint``: the best so far) is a file of
its own, outside the checkpoints: :meth:`RunMirror.follow_best` names it, each publish uploads it to
``<run>/checkpoint_callback/`` when it changed, with ``best.json`` (its size, SHA-256 and the callback's best
score) after it, and :meth:`RunMirror.fetch_best` brings it back, so a fit that resumes returns the best model
of every epoch, not of those after the resume. A file that does not match its record is one warning line and
is not fetched.

A checkpoint in the store is trusted only when its ``manifest.json`` is there and every object
it lists has the size and SHA-256 the manifest gives (a killed upload leaves no manifest, so
nothing half-written is trusted). An untrusted one, newer than the checkpoint resumed, is named
in one warning line and moved aside as ``damaged-<name>-<n>`` in the store, never deleted: the
same rule as for a local workdir. One code path for every store, ``file://`` included.
No TensorFlow here.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import stat
import tempfile
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from hvdkeras.common import log
from hvdkeras.common.checkpoint_format import DAMAGED, MANIFEST, NAME, inside, position
from hvdkeras.common.workdir import CHECKPOINT_DIR, CONFIG_FILE, METRICS_FILE

RUN_FILES = (METRICS_FILE, CONFIG_FILE)  # beside the checkpoints, published after them
BEST_DIR = "checkpoint_callback"  # the checkpoint callback's file and its record, beside the checkpoints
BEST_RECORD = "best.json"
_PUT_STAGING = re.compile(r"\.tmp-\d+$")  # _put_whole's temporary name: <file>.tmp-<pid>


def _digest(fs: Any, path: str) -> Tuple[int, str]:
    """(size, SHA-256) of the file at ``path`` on ``fs``, read once."""
    sha, size = hashlib.sha256(), 0
    with fs.open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
            size += len(block)
    return size, sha.hexdigest()


def _manifest(fs: Any, folder: str) -> Tuple[Optional[Dict[str, Dict[str, Any]]], Optional[str]]:
    """(the manifest's ``{file: {"size", "sha256"}}``, None) or (None, what is wrong with it)."""
    try:
        with fs.open(f"{folder}/{MANIFEST}", "rb") as f:
            entries = json.loads(f.read().decode())["files"]
    except FileNotFoundError:
        return None, f"{MANIFEST} is missing"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, f"{MANIFEST} is unreadable ({type(exc).__name__})"
    if not isinstance(entries, dict) or not all(isinstance(v, dict) for v in entries.values()):
        return None, f"{MANIFEST} is unreadable (not a table of files)"
    for rel in entries:  # the store is outside this process: a listed path never leaves its checkpoint's folder
        if not inside(rel):
            return None, f"{MANIFEST} lists {str(rel)[:80]!r}, a path outside its checkpoint"
    return entries, None


def problem(fs: Any, folder: str) -> Optional[str]:
    """What keeps the checkpoint in ``folder`` on ``fs`` from being trusted; ``None``: its manifest is there and
    every object it lists has the manifest's size and SHA-256 (objects it does not list are ignored)."""
    entries, wrong = _manifest(fs, folder)
    if entries is None:
        return wrong
    for rel, want in sorted(entries.items()):
        try:
            size, sha = _digest(fs, f"{folder}/{rel}")
        except FileNotFoundError:
            return f"{rel} is missing"
        if size != want.get("size"):
            return f"{rel} has {size} bytes, the manifest says {want.get('size')}"
        if sha != want.get("sha256"):
            return f"{rel} does not match its SHA-256 in the manifest"
    return None


def _local_files(folder: str) -> List[str]:
    """Every file under the local ``folder`` but the manifest, relative to it, sorted."""
    found = []
    for root, _, names in os.walk(folder):
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), folder).replace(os.sep, "/")
            if rel != MANIFEST:
                found.append(rel)
    return sorted(found)


LOCAL_PREFIX = "hvdkeras-run-"  # a rank's local folder: <tmp>/hvdkeras-run-<host and boot>-<pid>-<random>


def _this_boot() -> str:
    """12 hex digits naming this host and its boot: a local folder's owner is provably gone only when it is of the
    same host and boot (a shared temporary folder, or one that survives a reboot, holds others')."""
    import socket

    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        import psutil

        boot = str(int(psutil.boot_time()))
    return hashlib.sha256(f"{socket.gethostname()}\0{boot}".encode()).hexdigest()[:12]


def local_folder(parent: Optional[str] = None) -> str:
    """A new local folder for this process's run (in ``parent``, default the temporary folder). The folders of
    processes that are provably gone are removed first: of this host and boot, owned by this user, a folder and
    not a link, and whose process is not running (a rank killed before it could remove its own)."""
    import psutil

    parent = parent or tempfile.gettempdir()
    mine = f"{LOCAL_PREFIX}{_this_boot()}-"
    for name in os.listdir(parent):
        owner = name[len(mine):].split("-", 1)[0]
        if not (name.startswith(mine) and owner.isdigit()) or psutil.pid_exists(int(owner)):
            continue
        path = os.path.join(parent, name)
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid():
            shutil.rmtree(path, ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"{mine}{os.getpid()}-", dir=parent)


class RunMirror:
    """Rank 0's run folder mirrored between a local folder and the store (call on rank 0 only).

    Args:
        fs: the store's fsspec filesystem (``store.fs``).
        remote: the run's folder in the store, as ``fs`` names it
            (``store.get_localized_path(store.get_run_path(run_id))``).
        local: the local folder the trainer uses as its workdir.
        keep: the checkpoints kept in the store (0: all); older ones go after a new one is published.
        shown: the run's folder as a user knows it, for messages (default: ``remote``).
    """

    def __init__(self, fs: Any, remote: str, local: str, keep: int, shown: Optional[str] = None):
        self.fs = fs
        self.remote = remote.rstrip("/")
        self.local = local
        self.keep = keep
        self.shown = (shown or remote).rstrip("/")
        self.published: Set[str] = set()  # checkpoint folders the store holds whole (fetched or published here)
        self.best: Optional[Tuple[str, Callable[[], Any]]] = None  # follow_best's (local file, its score)
        self._best_sent: Optional[Tuple[int, int]] = None  # (mtime, size) of the best file the store holds

    def __repr__(self) -> str:  # the filesystem's repr may carry its options: never in a message
        return f"RunMirror({self.shown!r} <-> {self.local!r})"

    # ------------------------------------------------------------------ names

    @property
    def remote_checkpoints(self) -> str:
        """The store's checkpoint folder of the run."""
        return f"{self.remote}/{CHECKPOINT_DIR}"

    @property
    def local_checkpoints(self) -> str:
        """The local checkpoint folder of the run."""
        return os.path.join(self.local, CHECKPOINT_DIR)

    def _shown(self, name: str) -> str:
        return f"{self.shown}/{CHECKPOINT_DIR}/{name}"

    def stored(self) -> List[str]:
        """The store's checkpoint folders (trusted or not), oldest first."""
        try:
            self.fs.invalidate_cache(self.remote_checkpoints)
            names = [str(p).rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(self.remote_checkpoints, detail=False)]
        except FileNotFoundError:
            return []
        return sorted((n for n in set(names) if NAME.match(n)), key=position)

    def local_saved(self) -> List[str]:
        """The local checkpoint folders that are complete (their manifest is written last), oldest first."""
        if not os.path.isdir(self.local_checkpoints):
            return []
        return sorted((n for n in os.listdir(self.local_checkpoints)
                       if NAME.match(n) and os.path.isfile(os.path.join(self.local_checkpoints, n, MANIFEST))),
                      key=position)

    def follow_best(self, path: str, score: Callable[[], Any]) -> None:
        """Publishes the local file at ``path`` (the checkpoint callback's) with every publish, when it changed,
        recording ``score()`` (the callback's ``best``) beside it; :meth:`fetch_best` brings both back."""
        self.best = (path, score)

    @property
    def remote_best(self) -> str:
        """The store's folder for the checkpoint callback's file."""
        return f"{self.remote}/{BEST_DIR}"

    # ------------------------------------------------------------------ before training

    def fetch(self, warn: Callable[[str], None] = log.warning) -> Optional[str]:
        """Downloads the store's newest trusted checkpoint, ``metrics.jsonl`` and ``config.yaml`` into the local
        folder; the checkpoint's name, or ``None`` when the store holds none.

        Each newer untrusted checkpoint is named by ``warn`` in one line and moved aside in the store as
        ``damaged-<name>-<n>`` (kept, out of the way of the saves to come).
        """
        os.makedirs(self.local_checkpoints, exist_ok=True)
        self.remove_staging()
        found = None
        for name in reversed(self.stored()):
            staging = tempfile.mkdtemp(prefix=".fetching-", dir=self.local_checkpoints)
            try:
                wrong = self._download(name, staging)
                if wrong is None:
                    os.rename(staging, os.path.join(self.local_checkpoints, name))
                    found = name
                    break
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            aside = self._set_aside(name)
            warn(f"checkpoint {self._shown(name)} is damaged ({wrong}); kept as {aside}, trying the one before it")
        if found is not None:
            self.published.add(found)
        for run_file in RUN_FILES:
            try:
                self.fs.get_file(f"{self.remote}/{run_file}", os.path.join(self.local, run_file))
            except FileNotFoundError:
                pass
        return found

    def remove_staging(self) -> List[str]:
        """Deletes the temporary objects an upload cut short left in the run's folder and the best model's
        (``<file>.tmp-<pid>``, :meth:`_put_whole`); their names. :meth:`fetch` calls it first: the fit holds the
        run (:class:`hvdkeras.spark.common.runs.RunLock`), so no live writer stages there."""
        removed = []
        for folder in (self.remote, self.remote_best):
            try:
                self.fs.invalidate_cache(folder)
                found = [str(p) for p in self.fs.ls(folder, detail=False)]
            except FileNotFoundError:
                continue
            for path in found:
                name = path.rstrip("/").rsplit("/", 1)[-1]
                if _PUT_STAGING.search(name) and self.fs.isfile(path):
                    self.fs.rm(path)
                    removed.append(name)
            self.fs.invalidate_cache(folder)
        return removed

    def fetch_best(self, warn: Callable[[str], None] = log.warning) -> Tuple[bool, Optional[float]]:
        """Downloads the followed file from the store (:meth:`follow_best` first); ``(fetched, its score)``.

        Nothing is fetched when the store holds no record, or ``(False, None)`` with one ``warn`` line when the
        record is unreadable, names another file, or the stored file does not match it (an upload cut short).
        """
        if self.best is None:
            return False, None
        path = self.best[0]
        name = os.path.basename(path)
        shown, again = f"{self.shown}/{BEST_DIR}/{BEST_RECORD}", "the best model starts again from this fit"
        try:
            with self.fs.open(f"{self.remote_best}/{BEST_RECORD}", "rb") as f:
                record = json.loads(f.read().decode())
        except FileNotFoundError:
            return False, None
        except (OSError, ValueError) as exc:
            warn(f"{shown} is unreadable ({type(exc).__name__}); {again}")
            return False, None
        if not isinstance(record, dict) or record.get("file") != name:
            warn(f"{shown} does not record {name!r}; {again}")
            return False, None
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        staging = f"{path}.fetching-{os.getpid()}"
        try:
            self.fs.get_file(f"{self.remote_best}/{name}", staging)
            from fsspec.implementations.local import LocalFileSystem

            size, sha = _digest(LocalFileSystem(), staging)
            if (size, sha) != (record.get("size"), record.get("sha256")):
                warn(f"{self.shown}/{BEST_DIR}/{name} does not match {BEST_RECORD} (an upload cut short?); {again}")
                return False, None
            os.replace(staging, path)
        except FileNotFoundError:
            warn(f"{self.shown}/{BEST_DIR}/{name} is missing; {again}")
            return False, None
        finally:
            if os.path.exists(staging):
                os.remove(staging)
        stat = os.stat(path)
        self._best_sent = (stat.st_mtime_ns, stat.st_size)
        score = record.get("score")
        return True, float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else None

    def _download(self, name: str, staging: str) -> Optional[str]:
        """Downloads checkpoint ``name``'s manifest and the objects it lists into ``staging``; what is wrong, or
        ``None`` when every downloaded file has the manifest's size and SHA-256."""
        folder = f"{self.remote_checkpoints}/{name}"
        entries, wrong = _manifest(self.fs, folder)
        if entries is None:
            return wrong
        for rel in sorted(entries):
            target = os.path.join(staging, *rel.split("/"))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            try:
                self.fs.get_file(f"{folder}/{rel}", target)
            except FileNotFoundError:
                return f"{rel} is missing"
        self.fs.get_file(f"{folder}/{MANIFEST}", os.path.join(staging, MANIFEST))
        from fsspec.implementations.local import LocalFileSystem

        return problem(LocalFileSystem(), staging)

    def _set_aside(self, name: str) -> str:
        """Moves the store's checkpoint ``name`` to ``damaged-<name>-<n>``; where it went, as a user knows it."""
        taken = set()
        try:
            taken = {str(p).rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(self.remote_checkpoints, detail=False)}
        except FileNotFoundError:
            pass
        n = 1
        while f"{DAMAGED}{name}-{n}" in taken:
            n += 1
        aside = f"{DAMAGED}{name}-{n}"
        try:
            self._move(f"{self.remote_checkpoints}/{name}", f"{self.remote_checkpoints}/{aside}")
        except (OSError, ValueError) as exc:
            return f"{self._shown(name)} (could not be moved aside: {type(exc).__name__})"
        finally:
            self.fs.invalidate_cache(self.remote_checkpoints)
        return self._shown(aside)

    def _move(self, source: str, target: str) -> None:
        """Moves a folder in the store object by object: every copy first, then the originals, manifest first
        (an object store renames nothing; fsspec's recursive ``mv`` trips over S3's folder keys)."""
        self.fs.invalidate_cache(source)
        files = sorted(str(p) for p in self.fs.find(source))
        root = self.fs._strip_protocol(source).rstrip("/")
        for path in files:
            rel = path[len(root):].lstrip("/")
            if "/" in rel:
                self.fs.makedirs(f"{target}/{rel.rsplit('/', 1)[0]}", exist_ok=True)
            else:
                self.fs.makedirs(target, exist_ok=True)
            self.fs.copy(path, f"{target}/{rel}")
        for path in sorted(files, key=lambda p: not p.endswith("/" + MANIFEST)):
            self.fs.rm(path)
        if self.fs.exists(source):  # a local folder, now empty
            self.fs.rm(source, recursive=True)

    # ------------------------------------------------------------------ after each save

    def publish(self) -> List[str]:
        """Uploads each local checkpoint the store does not hold yet (its manifest last), then ``metrics.jsonl``
        and ``config.yaml``, then removes the store's checkpoints beyond ``keep``; the checkpoints uploaded."""
        uploaded = []
        for name in self.local_saved():
            if name not in self.published:
                self._upload(name)
                self.published.add(name)
                uploaded.append(name)
        for run_file in RUN_FILES:
            path = os.path.join(self.local, run_file)
            if os.path.isfile(path):
                self._put_whole(path, f"{self.remote}/{run_file}")
        if uploaded:
            self.prune()
        self._publish_best()
        return uploaded

    def _publish_best(self) -> bool:
        """Uploads the followed file when it changed since it was last sent, then its record; whether it did."""
        if self.best is None or not os.path.isfile(self.best[0]):
            return False
        path, score = self.best
        stat = os.stat(path)
        if (stat.st_mtime_ns, stat.st_size) == self._best_sent:
            return False
        from fsspec.implementations.local import LocalFileSystem

        size, sha = _digest(LocalFileSystem(), path)
        try:
            value: Optional[float] = float(score())
        except (TypeError, ValueError):
            value = None
        record = {"file": os.path.basename(path), "size": size, "sha256": sha,
                  "score": value if value is not None and math.isfinite(value) else None}
        self._put_whole(path, f"{self.remote_best}/{record['file']}")
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(record, f)
        try:
            self._put_whole(f.name, f"{self.remote_best}/{BEST_RECORD}")  # last: the file it names is whole
        finally:
            os.remove(f.name)
        self._best_sent = (stat.st_mtime_ns, stat.st_size)
        return True

    def _upload(self, name: str) -> None:
        source, target = os.path.join(self.local_checkpoints, name), f"{self.remote_checkpoints}/{name}"
        if self.fs.exists(target):  # an untrusted leftover of the same name: kept, out of the way
            self._set_aside(name)
        self.fs.makedirs(target, exist_ok=True)
        for rel in _local_files(source):
            if "/" in rel:
                self.fs.makedirs(f"{target}/{rel.rsplit('/', 1)[0]}", exist_ok=True)
            self.fs.put_file(os.path.join(source, *rel.split("/")), f"{target}/{rel}")
        self.fs.put_file(os.path.join(source, MANIFEST), f"{target}/{MANIFEST}")  # last: now it is trusted
        self.fs.invalidate_cache(self.remote_checkpoints)

    def _put_whole(self, source: str, target: str) -> None:
        """Uploads a file under a temporary name, then moves it into place: a reader sees the old or the new."""
        parent = target.rsplit("/", 1)[0]
        self.fs.makedirs(parent, exist_ok=True)
        tmp = f"{target}.tmp-{os.getpid()}"
        self.fs.put_file(source, tmp)
        self.fs.mv(tmp, target)
        self.fs.invalidate_cache(parent)

    def prune(self) -> List[str]:
        """Removes the store's oldest checkpoints beyond ``keep`` (each manifest first, so a removal cut short
        leaves nothing trusted); the ``damaged-`` ones are never touched. The checkpoints removed."""
        if self.keep <= 0:
            return []
        doomed = [n for n in self.stored() if self.fs.exists(f"{self.remote_checkpoints}/{n}/{MANIFEST}")]
        doomed = doomed[:-self.keep]
        for name in doomed:
            folder = f"{self.remote_checkpoints}/{name}"
            self.fs.rm(f"{folder}/{MANIFEST}")
            self.fs.rm(folder, recursive=True)
            self.published.discard(name)
        self.fs.invalidate_cache(self.remote_checkpoints)
        return doomed
