"""A Spark estimator's run in the store: its name, the one fit that holds it, and the job its checkpoints hold.

``fit`` trains into ``<runs>/<run_id>/`` (:meth:`FilesystemStore.get_run_path`), and a later ``fit`` with the
same ``run_id`` resumes there. Three rules keep runs from clobbering each other, on any store:

* :func:`check_run_id`: a ``run_id`` is a name (letters, digits, ``.``, ``_``, ``-``), never a path, so no
  fit writes or prunes outside its run's folder; :func:`new_run_id` is unique when none is given.
* :class:`RunLock`: a fit holds its run through ``<run>/.hvdkeras-lock.json`` (who holds it and when it was
  last seen). A heartbeat thread keeps it fresh; a second ``fit`` on a run whose lock was seen within
  :data:`STALE_S` seconds is refused in one line naming the holder. A lock left by a driver that died goes
  stale and is taken over with a warning. An object store has no exclusive create, so the lock is written,
  then read back: of two fits that start together, the one whose token is not there backs off.
* :func:`check_same_job`: ``<run>/job.json`` records what trained the run's checkpoints (the model's
  architecture, the optimizer, the loss, the columns, the batch, the seed, the stack). Resuming them with
  another job is refused in one line listing the differences, unless ``resume='force'``.

No TensorFlow here: what describes a model comes from the caller.
"""
from __future__ import annotations

import json
import re
import secrets
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional

from hvdkeras.common import log
from hvdkeras.common.errors import ConfigError, SetupError
from hvdkeras.common.workdir_guard import holder_line
from hvdkeras.spark.common.store import FilesystemStore

LOCK_FILE = ".hvdkeras-lock.json"
JOB_FILE = "job.json"
HEARTBEAT_S = 10.0
STALE_S = 60.0
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
    """

    def __init__(self, store: FilesystemStore, run_id: str, heartbeat_s: float = HEARTBEAT_S,
                 stale_s: float = STALE_S, clock: Callable[[], float] = time.time):
        self.store, self.run_id = store, run_id
        self.path = f"{store.get_run_path(run_id)}/{LOCK_FILE}"
        self.heartbeat_s, self.stale_s, self.clock = heartbeat_s, stale_s, clock
        self.token = secrets.token_hex(16)
        self.holder = holder_line()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _refuse(self, held: Mapping[str, Any]) -> SetupError:
        age = max(0.0, self.clock() - _heartbeat(held))
        return SetupError(f"run_id {self.run_id!r} is being fitted by another fit ({_holder(held)};"
                          f" last seen {age:.0f} s ago): wait for it to end, or pass another run_id")

    def _write(self) -> None:
        self.store.write_text(self.path, json.dumps({"token": self.token, "holder": self.holder,
                                                     "heartbeat": self.clock()}))

    def acquire(self) -> "RunLock":
        """Takes the run, or refuses in one line when another fit holds it.

        Raises:
            SetupError: a lock seen within ``stale_s`` seconds is there, or another fit wrote its lock at once.
        """
        held = _read_json(self.store, self.path)
        if held is not None and held.get("token") != self.token:
            if self.clock() - _heartbeat(held) < self.stale_s:
                raise self._refuse(held)
            log.warning(f"run_id {self.run_id!r}: taking over a lock last seen more than {self.stale_s:g} s ago"
                        f" ({_holder(held)}), whose fit has ended without releasing it")
        self._write()
        back = _read_json(self.store, self.path)
        if back is None or back.get("token") != self.token:
            raise self._refuse(back or {})
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name=f"hvdkeras-run-lock-{self.run_id}", daemon=True)
        self._thread.start()
        return self

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            held = _read_json(self.store, self.path)
            if held is not None and held.get("token") != self.token:
                log.warning(f"run_id {self.run_id!r}: another fit took this run's lock ({_holder(held)})")
                return
            try:
                self._write()
            except OSError as exc:  # a store that does not answer now: the next beat tries again
                log.warning(f"run_id {self.run_id!r}: the lock's heartbeat could not be written ({exc})")

    def release(self) -> None:
        """Stops the heartbeat and removes the lock, if it is still this fit's."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
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
