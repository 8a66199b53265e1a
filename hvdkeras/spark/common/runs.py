"""A Spark estimator's run in the store: its name, the one fit that holds it, and the job its checkpoints hold.

``fit`` trains into ``<runs>/<run_id>/`` (:meth:`FilesystemStore.get_run_path`), and a later ``fit`` with the
same ``run_id`` resumes there. Three rules keep runs from clobbering each other, on any store:

* :func:`check_run_id`: a ``run_id`` is a name (letters, digits, ``.``, ``_``, ``-``), never a path, so no
  fit writes or prunes outside its run's folder; :func:`new_run_id` is unique when none is given.
* :class:`RunLock`: a fit holds its run through a lock object, ``<run>/.hvdkeras-lock-<generation>.json``
  (who holds it and when it was last seen). Taking the run is one atomic step: the exclusive create of the
  next generation's object (``O_EXCL`` on a folder store, S3's ``If-None-Match: *``, fsspec's ``"xb"`` mode),
  so of two fits that start together exactly one creates it and the other is refused. A heartbeat thread
  keeps the lock fresh; a second ``fit`` on a run whose lock was seen within :data:`STALE_S` seconds is
  refused in one line naming the holder. A lock left by a driver that died goes stale and is taken over, by
  the next generation's exclusive create, with a warning; a fit whose lock was taken over stops in one line.
* :func:`check_same_job`: ``<run>/job.json`` records what trained the run's checkpoints (the model's
  architecture, the optimizer, the loss, the columns, the batch, the seed, the stack). Resuming them with
  another job is refused in one line listing the differences, unless ``resume='force'``.

:class:`StoredRun` is one run in the store as one object: its folder and checkpoints, its lock, its job record and
its intermediate data; the estimator and the ranks compute no path of their own. No TensorFlow here: what
describes a model comes from the caller.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import secrets
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from hvdkeras.common import log
from hvdkeras.common.errors import ConfigError, SetupError
from hvdkeras.common.workdir_guard import holder_line
from hvdkeras.spark.common.store import ExclusiveCreateError, FilesystemStore

LOCK_FILE = ".hvdkeras-lock.json"  # an earlier version's lock: read as generation 0, removed when taken over
LOCK_PREFIX = ".hvdkeras-lock-"
_LOCK_NAME = re.compile(r"\.hvdkeras-lock-(\d{1,18})\.json")
JOB_FILE = "job.json"
HEARTBEAT_S = 10.0
STALE_S = 60.0
WHOLE_WAIT_S = 1.0  # how long a heartbeat reads a newer lock again while it is being written
RESUME_CHOICES = ("auto", "force")
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_run_id(run_id: Any) -> str:
    """``run_id`` when it is a name a run's folder can take.

    Raises:
        ConfigError: not a string of letters, digits, ``.``, ``_`` and ``-`` (1 to 128, a letter or digit first).
    """
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise ConfigError("run_id must be a name of letters, digits, '.', '_' and '-' (at most 128, starting with a"
                          f" letter or digit), not a path (Received: run_id={run_id!r})")
    return run_id


def new_run_id(prefix: str = "keras") -> str:
    """A run_id no other fit has: ``<prefix>_<date>-<time>_<8 hex digits>``."""
    return f"{prefix}_{time.strftime('%Y%m%d-%H%M%S')}_{secrets.token_hex(4)}"


def fit_data_index(run_id: str) -> str:
    """The store's dataset index of one fit's intermediate data (``intermediate_train_data.<index>``)."""
    return f"{run_id}.{secrets.token_hex(4)}"


def _read_json(store: FilesystemStore, path: str) -> Optional[Dict[str, Any]]:
    """The JSON object at ``path``, or None when there is none (or it is not whole)."""
    try:
        value = json.loads(store.read(path).decode())
    except (FileNotFoundError, ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _holder(held: Mapping[str, Any]) -> str:
    """Who a lock in the store names, as one short line (the store is outside this process: anything may be there)."""
    text = " ".join(str(held.get("holder", "unknown")).split())
    return text[:200] or "unknown"


def _heartbeat(held: Mapping[str, Any]) -> float:
    """When a lock in the store was last refreshed (0: never, or not a number)."""
    try:
        return float(held.get("heartbeat", 0.0))
    except (TypeError, ValueError):
        return 0.0


class RunLock:
    """One fit's hold on run ``run_id`` in ``store``: :meth:`acquire` it, :meth:`release` it (or use ``with``).

    Args:
        store: the store holding the run.
        run_id: the run (already :func:`check_run_id`'ed).
        heartbeat_s: how often the lock is refreshed while held.
        stale_s: how old a lock's last refresh may be before another fit takes it over.
        clock: the time (tests pass a fake one).
        on_lost: called once, from the heartbeat's thread, when another fit took the lock over (the fit cancels
            its Spark jobs); :meth:`lost_error` then gives the line that stops the fit.
    """

    def __init__(self, store: FilesystemStore, run_id: str, heartbeat_s: float = HEARTBEAT_S,
                 stale_s: float = STALE_S, clock: Callable[[], float] = time.time,
                 on_lost: Optional[Callable[[], None]] = None):
        self.store, self.run_id = store, run_id
        self.folder = store.get_run_path(run_id)
        self.path = ""  # this fit's lock object, once acquired
        self.generation = 0
        self.heartbeat_s, self.stale_s, self.clock = heartbeat_s, stale_s, clock
        self.token = secrets.token_hex(16)
        self.holder = holder_line()
        self.on_lost = on_lost
        self.lost: Optional[str] = None  # who took the lock over, once another fit did
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _refuse(self, held: Mapping[str, Any]) -> SetupError:
        age = max(0.0, self.clock() - _heartbeat(held))
        return SetupError(f"run_id {self.run_id!r} is being fitted by another fit ({_holder(held)};"
                          f" last seen {age:.0f} s ago): wait for it to end, or pass another run_id")

    def _payload(self) -> str:
        return json.dumps({"token": self.token, "holder": self.holder, "heartbeat": self.clock()})

    def generations(self) -> List[Tuple[int, str]]:
        """The run's lock objects as (generation, path), oldest first; an earlier version's is generation 0."""
        where = self.store.get_localized_path(self.folder)
        try:
            self.store.fs.invalidate_cache(where)
            names = [str(p).rstrip("/").rsplit("/", 1)[-1] for p in self.store.fs.ls(where, detail=False)]
        except (FileNotFoundError, NotADirectoryError):
            return []
        found = [(0, f"{self.folder}/{LOCK_FILE}")] if LOCK_FILE in names else []
        for name in names:
            match = _LOCK_NAME.fullmatch(name)
            if match:
                found.append((int(match.group(1)), f"{self.folder}/{name}"))
        return sorted(found)

    def _lock_path(self, generation: int) -> str:
        return f"{self.folder}/{LOCK_PREFIX}{generation:010d}.json"

    def _last_seen(self, path: str) -> Tuple[Dict[str, Any], float]:
        """(what the lock at ``path`` holds, when it was last refreshed): one that is not whole yet (being created)
        was last seen when it was written, by the store's clock where it has one."""
        held = _read_json(self.store, path)
        if held is not None:
            return held, _heartbeat(held)
        try:
            modified = self.store.fs.modified(self.store.get_localized_path(path)).timestamp()
        except (OSError, NotImplementedError, AttributeError, ValueError):
            modified = 0.0
        return {"holder": "a fit that is taking the run"}, modified

    def _whole(self, path: str) -> Dict[str, Any]:
        """What the newer lock at ``path`` holds, read again for up to :data:`WHOLE_WAIT_S` while it is not whole:
        a folder's exclusive create makes the file, then writes it, and a heartbeat that read it in between named
        "a fit that is taking the run" rather than the fit that took it."""
        deadline = time.monotonic() + WHOLE_WAIT_S
        held = _read_json(self.store, path)
        while held is None and time.monotonic() < deadline:
            time.sleep(0.05)
            held = _read_json(self.store, path)
        return held if held is not None else self._last_seen(path)[0]

    def acquire(self) -> "RunLock":
        """Takes the run, or refuses in one line when another fit holds it.

        Raises:
            SetupError: a lock seen within ``stale_s`` seconds is there, or another fit took the run at once.
        """
        older = self.generations()
        newest = older[-1][0] if older else 0
        stale: Optional[Dict[str, Any]] = None
        if older:
            held, seen = self._last_seen(older[-1][1])
            if self.clock() - seen < self.stale_s:
                raise self._refuse(dict(held, heartbeat=seen))
            stale = held
        path = self._lock_path(newest + 1)
        try:
            self.store.create_exclusive(path, self._payload())
        except FileExistsError:  # another fit created this generation first: it holds the run
            raise self._refuse(self._last_seen(path)[0] | {"heartbeat": self.clock()}) from None
        except ExclusiveCreateError as exc:
            self._write_and_read_back(path, str(exc))
        self.path, self.generation = path, newest + 1
        if stale is not None:
            log.warning(f"run_id {self.run_id!r}: taking over a lock last seen more than {self.stale_s:g} s ago"
                        f" ({_holder(stale)}), whose fit has ended without releasing it")
        for _, old in older:  # taken over: the stale generations go
            with contextlib.suppress(OSError):
                self.store.fs.rm(self.store.get_localized_path(old))
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name=f"hvdkeras-run-lock-{self.run_id}", daemon=True)
        self._thread.start()
        return self

    def _write_and_read_back(self, path: str, why: str) -> None:
        """The lock on a store without an exclusive create: written unless there, then read back (one warning line:
        two fits that start at the same instant may both pass)."""
        log.warning(f"run_id {self.run_id!r}: the store cannot create a file exclusively ({why}); its lock is written"
                    " and read back, which two fits started at the same instant may both pass: start one fit per"
                    " run_id at a time")
        if self.store.exists(path):
            raise self._refuse(self._last_seen(path)[0])
        self.store.write_text(path, self._payload())
        back = _read_json(self.store, path)
        if back is None or back.get("token") != self.token:
            raise self._refuse(back or {})

    def _taken_over(self) -> Optional[str]:
        """Who holds the run now when it is not this fit (a newer generation, or this fit's lock gone)."""
        gens = self.generations()
        if gens and gens[-1][0] > self.generation:
            return _holder(self._whole(gens[-1][1]))
        if self.generation not in [g for g, _ in gens]:
            return "this fit's lock is gone from the store"
        return None

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                other = self._taken_over()
                if other is None:
                    self.store.write_text(self.path, self._payload())
                    continue
            except OSError as exc:  # a store that does not answer now: the next beat tries again
                log.warning(f"run_id {self.run_id!r}: the lock's heartbeat could not be written ({exc})")
                continue
            self.lost = other
            log.warning(f"run_id {self.run_id!r}: another fit took this run's lock ({other}); this fit stops")
            if self.on_lost is not None:
                self.on_lost()
            return

    def lost_error(self) -> Optional[SetupError]:
        """The one line that stops this fit when another fit took its lock over (None: it still holds the run)."""
        if self.lost is None:
            return None
        return SetupError(f"run_id {self.run_id!r}: another fit took this run over while this fit trained"
                             f" ({self.lost}; this fit's heartbeat had not reached the store for {self.stale_s:g} s);"
                             " this fit stopped: its checkpoints so far stay in the store, fit again once the other"
                             " ends to resume")

    def release(self) -> None:
        """Stops the heartbeat and removes the lock, if it is still this fit's."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if not self.path:
            return
        held = _read_json(self.store, self.path)
        if held is not None and held.get("token") == self.token:
            self.store.fs.rm(self.store.get_localized_path(self.path))

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def holds_checkpoints(store: FilesystemStore, run_id: str) -> bool:
    """Whether run ``run_id`` has any checkpoint in the store."""
    path = store.get_checkpoint_path(run_id)
    if path is None or not store.exists(path):
        return False
    names = store.fs.ls(store.get_localized_path(path), detail=False)
    return any(str(name).rstrip("/").rsplit("/", 1)[-1].startswith("epoch-") for name in names)


def _short(value: Any, limit: int = 200) -> str:
    text = "(none)" if value is None else str(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def differences(before: Mapping[str, Any], now: Mapping[str, Any]) -> List[str]:
    """``key: before -> now`` for each key whose value differs, in ``now``'s order then ``before``'s."""
    keys = list(dict.fromkeys([*now, *before]))
    return [f"{key}: {_short(before.get(key))} -> {_short(now.get(key))}" for key in keys
            if before.get(key) != now.get(key)]


def check_same_job(store: FilesystemStore, run_id: str, job: Mapping[str, Any], resume: str = "auto") -> List[str]:
    """Refuses to resume run ``run_id``'s checkpoints with another job (:func:`record_job` recorded theirs).

    Args:
        store: the store holding the run.
        run_id: the run.
        job: what this fit trains, as short strings by name (``model``, ``optimizer``, ``loss``, ...).
        resume: ``"auto"`` refuses another job's checkpoints; ``"force"`` resumes from them anyway.

    Returns:
        The differences a ``resume='force'`` resumes over (empty when the job is the same or the run has no
        checkpoints).

    Raises:
        ConfigError: the run's checkpoints were trained by another job and ``resume`` is not ``"force"``.
    """
    if resume not in RESUME_CHOICES:
        raise ConfigError(f"resume must be one of {', '.join(RESUME_CHOICES)} (Received: resume={resume!r})")
    if not holds_checkpoints(store, run_id):
        return []
    before = _read_json(store, f"{store.get_run_path(run_id)}/{JOB_FILE}")
    changed = differences(before, job) if before is not None else []
    if changed and resume != "force":
        raise ConfigError(f"run_id {run_id!r} holds checkpoints trained by another job ({'; '.join(changed)}):"
                          " pass another run_id to start over, or resume='force' to continue from its weights anyway")
    return changed


def record_job(store: FilesystemStore, run_id: str, job: Mapping[str, Any]) -> None:
    """Records ``job`` as what trains run ``run_id``'s checkpoints from now on (``<run>/job.json``)."""
    store.write_text(f"{store.get_run_path(run_id)}/{JOB_FILE}", json.dumps(dict(job), indent=1, sort_keys=True))


@dataclasses.dataclass(frozen=True)
class StoredRun:
    """Run ``run_id`` in ``store``: where its files are, who holds it, what trained it, and its fit's data.

    The store's layout (:class:`~hvdkeras.spark.common.store.FilesystemStore`) and the rules of this module, behind
    one name: a fit makes one, holds its :meth:`lock`, checks and records its :meth:`check_job`/:meth:`record_job`,
    writes its data at :meth:`data_paths`, trains into :attr:`folder` and removes its data after
    (:meth:`remove_data`).
    """

    store: FilesystemStore
    run_id: str
    data_index: str = ""  # this fit's data among the store's datasets: unique per fit (:func:`fit_data_index`)

    def __post_init__(self) -> None:
        if not self.data_index:
            object.__setattr__(self, "data_index", fit_data_index(self.run_id))

    @property
    def path(self) -> str:
        """The run's folder as the store names it (with its protocol)."""
        return self.store.get_run_path(self.run_id)

    @property
    def folder(self) -> str:
        """The run's folder as its filesystem names it: what the ranks mirror their local run to."""
        return self.store.get_localized_path(self.path)

    @property
    def checkpoints_shown(self) -> str:
        """Where the run's checkpoints are, as a message shows it to the user (a local path, or the store's URL)."""
        checkpoints = self.store.get_checkpoint_path(self.run_id) or f"{self.path}/checkpoints"
        return self.store.get_localized_path(checkpoints) if self.store.is_local() else checkpoints

    def lock(self, on_lost: Optional[Callable[[], None]] = None) -> RunLock:
        """The run's lock (not yet taken: use it as a context manager)."""
        return RunLock(self.store, self.run_id, on_lost=on_lost)

    def check_job(self, job: Mapping[str, Any], resume: str = "auto") -> List[str]:
        """:func:`check_same_job` for this run."""
        return check_same_job(self.store, self.run_id, job, resume)

    def record_job(self, job: Mapping[str, Any]) -> None:
        """:func:`record_job` for this run."""
        record_job(self.store, self.run_id, job)

    def data_paths(self) -> Tuple[str, str]:
        """Where this run's fit writes its training and validation rows (the store's paths for :attr:`data_index`)."""
        return self.store.get_train_data_path(self.data_index), self.store.get_val_data_path(self.data_index)

    def remove_data(self) -> None:
        """Removes this run's fit data from the store (what :meth:`data_paths` names, where it exists)."""
        for path in self.data_paths():
            if self.store.exists(path):
                self.store.fs.rm(self.store.get_localized_path(path), recursive=True)
