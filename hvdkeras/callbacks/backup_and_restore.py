"""Resume after a crash or preemption, on every rank, from rank 0's latest intact backup."""
from __future__ import annotations

import shutil
import time
from typing import Callable, Optional, Tuple, Union

import hvdkeras
from hvdkeras.callbacks import divergence
from hvdkeras.callbacks.position_tracker import PositionTracker
from hvdkeras.callbacks.preemption import Preempted, SignalFlag, StopAgreement
from hvdkeras.common import log, signals
from hvdkeras.common.errors import CheckpointError
from hvdkeras.runtime import checkpointing, compat, distributed
from hvdkeras.runtime.compat import keras
from hvdkeras.runtime.position import RunPosition


class BackupAndRestore(keras.callbacks.Callback):
    """Keras' ``BackupAndRestore`` made rank-correct; same arguments, plus ``keep``, ``every_epochs``,
    ``preemption``, ``grace_s``, ``on_save_error`` and ``check_divergence``.

    Rule enforced: when training starts, rank 0 finds the newest intact backup in
    ``backup_dir`` (model weights, optimizer slots and step counter; a damaged one is
    named in a warning and skipped, see :mod:`hvdkeras.runtime.checkpointing`), loads it and
    broadcasts it, and every rank continues ``fit`` at the epoch after it, so the
    learning-rate callbacks (which compute the rate from the epoch) pick up the
    schedule where it was. If rank 0 cannot load it, every rank stops with the same
    :class:`~hvdkeras.common.errors.CheckpointError` instead of waiting for rank 0.
    Only rank 0 writes: after every ``every_epochs`` epochs (and the last), an
    atomic ``epoch-NNNN`` directory, keeping the newest ``keep``. With
    ``delete_checkpoint=True`` (Keras' default) the backups are removed when ``fit``
    ends normally, as in Keras.

    ``preemption=True``: SIGTERM on any rank stops every rank at the same batch
    boundary (see :mod:`hvdkeras.callbacks.preemption`: the ranks compare flags about
    once a second, so within about a second and a batch of the first rank's signal);
    rank 0 writes ``epoch-NNNN-batch-BBBB`` (model, optimizer and its step, epoch and
    batch), then every rank prints ``preempted at epoch E, batch B; checkpoint written:
    <path>`` and leaves with :class:`Preempted` (a ``SystemExit``, status 75).
    A stop agreed on an epoch's last batch lets that epoch end first (validation, metrics
    and the other callbacks' ``on_epoch_end``), writes the whole-epoch ``epoch-NNNN``,
    stops ``fit`` and leaves from ``on_train_end`` with ``preempted at the end of epoch E``.
    A line warns if that took longer than ``grace_s`` seconds after the signal.

    ``on_save_error``: ``"stop"`` raises the save's one-line ``CheckpointError`` (the
    earlier checkpoints stay intact); ``"continue"`` prints it as a warning and trains on.

    ``check_divergence`` (on by default): before every save, the preemption's included,
    the ranks compare their trainable weights (:func:`hvdkeras.callbacks.divergence.check`,
    skipped when an earlier callback compared them at the same step); weights that differ
    between ranks stop every rank with one line and are not written. Every rank must run
    this callback (rank 0 alone writes).

    Where the run is and what it resumed from live in its :class:`hvdkeras.runtime.position.RunPosition`:
    by default its own, on ``backup_dir``, which it moves with a
    :class:`~hvdkeras.callbacks.position_tracker.PositionTracker` of its own; or ``position``, one to share, as the
    trainer does, which a ``PositionTracker(position)`` placed first in the callbacks moves (without one, ``fit``
    stops at its start with one line). :meth:`restore` can also be called before ``fit`` (collectively) to
    learn where to start, e.g. to build an input pipeline positioned there: it returns
    ``(epoch, batch)``. ``fit`` itself always starts at a whole epoch; to resume a
    mid-epoch backup exactly, run the rest of that epoch as its own ``fit`` over the
    data with ``skip(batch)`` after :meth:`continue_at` ``(epoch, batch)`` (the trainer does).

    Args:
        backup_dir: the folder of the backups, one ``epoch-NNNN`` (or ``epoch-NNNN-batch-BBBB``) folder each.
        save_freq: Keras' argument; only ``"epoch"`` is taken (the preemption's backups come at a batch).
        delete_checkpoint: remove ``backup_dir`` when ``fit`` ends normally, as Keras does.
        save_before_preemption: Keras' argument; only ``False`` is taken (``preemption`` does it here).
        keep: how many of the newest backups rank 0 keeps.
        every_epochs: back up after every this many epochs, and after the last.
        preemption: on SIGTERM, stop every rank at one batch and back up there.
        grace_s: the seconds after the signal that backup should take at most; a warning line says when it
            took longer.
        on_save_error: ``"stop"``: a failed save stops training; ``"continue"``: a warning, and training goes on.
        check_divergence: compare the ranks' trainable weights before every save.
        position: a :class:`~hvdkeras.runtime.position.RunPosition` to share, whose checkpoints are in
            ``backup_dir`` and which a ``PositionTracker`` first in the callbacks moves (``None``: its own).
    """

    EXIT_STAGGER_S = 2.0  # how long ranks other than 0 wait before leaving after a preemption (wait_to_leave)
    check_interval_s = 1.0  # how often (in training time) the ranks compare their preemption flags

    def __init__(self, backup_dir: str, save_freq="epoch", delete_checkpoint: bool = True,
                 save_before_preemption: bool = False, keep: int = 1, every_epochs: int = 1,
                 preemption: bool = False, grace_s: float = 30.0, on_save_error: str = "stop",
                 check_divergence: bool = True, position: Optional[RunPosition] = None):
        super().__init__()
        if save_freq != "epoch":
            raise ValueError(
                "BackupAndRestore saves at epoch ends (and, with preemption=True, at the batch where a SIGTERM"
                f" stops training). Received: save_freq={save_freq!r} (use 'epoch')"
            )
        if save_before_preemption:
            raise ValueError("save_before_preemption needs a TPU/MultiWorkerMirroredStrategy preemption handler;"
                             " use preemption=True. Received: save_before_preemption=True")
        if every_epochs < 1:
            raise ValueError(f"every_epochs must be >= 1; received: every_epochs={every_epochs}")
        if on_save_error not in ("stop", "continue"):
            raise ValueError(f"on_save_error must be 'stop' or 'continue'; received: on_save_error={on_save_error!r}")
        self.backup_dir = backup_dir
        self.delete_checkpoint = delete_checkpoint
        self.every_epochs = every_epochs
        self.preemption = preemption
        self.grace_s = grace_s
        self.on_save_error = on_save_error
        self.check_divergence = check_divergence
        # Its own position, it moves itself (the same tracker, driven from its hooks); a shared one is moved by the
        # tracker first in the list. Without preemption it counts no batch, so Keras 2 can skip the batch hooks.
        self._tracker: Optional[PositionTracker] = None
        if position is None:
            position = RunPosition(checkpointing.CheckpointStore(backup_dir, keep=keep))
            self._tracker = PositionTracker(position, count_batches=preemption)
        elif position.store is None or position.store.directory != backup_dir:
            where = None if position.store is None else position.store.directory
            raise ValueError("position must keep its checkpoints in backup_dir, where this callback writes them;"
                             f" received: backup_dir={backup_dir!r}, a position whose store is {where!r}")
        self.position = position
        self.signal_flag = SignalFlag()
        self._agreement: Optional[StopAgreement] = None
        self._trackable = None
        self._stop_at_epoch_end = False
        self._preempted_line: Optional[str] = None  # agreed on an epoch's last batch: leave when fit ends
        # How a rank other than 0 waits before leaving after a preemption. Launchers stop the whole job when
        # its first rank exits, and SIGTERM kills a Python that is already shutting down: rank 0 leaves
        # first, the others while still catching the signal. Alone in a model.fit, a fixed EXIT_STAGGER_S;
        # a driver makes it wait until rank 0's process is gone (leave_after, with hvdkeras.common.peers).
        self._wait_to_leave: Callable[[], object] = lambda: time.sleep(self.EXIT_STAGGER_S)

    @property
    def store(self) -> checkpointing.CheckpointStore:
        """The checkpoint folders in ``backup_dir``."""
        assert self.position.store is not None  # __init__ gives the position a store
        return self.position.store

    @property
    def restored(self) -> Optional[checkpointing.CheckpointInfo]:
        """The checkpoint the last :meth:`restore` loaded (``None``: there was none)."""
        return self.position.restored

    @property
    def last_saved(self) -> Optional[checkpointing.CheckpointInfo]:
        """The checkpoint rank 0 wrote last (``None`` on the other ranks and before the first save)."""
        return self.position.last_saved

    def restore(self, model=None) -> Tuple[int, int]:
        """Collective: loads the latest intact backup on rank 0 and broadcasts it.

        Returns:
            ``(epoch, batch)`` where the next ``fit`` continues; ``(0, 0)`` with no backup.
        """
        return self.position.resume(model or self.model)

    def continue_at(self, epoch: int, batch: int = 0) -> None:
        """The next ``fit`` starts at ``epoch`` with the weights it has, loading nothing; its first epoch
        is counted from batch ``batch`` on (a fit over the rest of an interrupted epoch)."""
        self.position.continue_at(epoch, batch)

    def leave_after(self, wait: Callable[[Callable[[], bool]], object]) -> None:
        """After a preemption, ranks other than 0 leave once ``wait`` returns, not a fixed time later.

        Args:
            wait: called with ``stop``, a function that turns true when a further SIGTERM arrives
                (e.g. :meth:`hvdkeras.common.peers.PeerTable.wait_until_root_gone`).
        """
        def wait_for_root() -> object:
            seen = self.signal_flag.count
            return wait(lambda: self.signal_flag.count > seen)

        self._wait_to_leave = wait_for_root

    # ------------------------------------------------------------------ hooks

    def _implements_train_batch_hooks(self):
        return self.preemption

    def on_train_begin(self, logs=None):
        """Its own position: restores the latest backup unless the start is decided, and ``fit`` continues at its
        epoch (:class:`~hvdkeras.callbacks.position_tracker.PositionTracker`); a shared one a tracker before
        it has begun."""
        if self._tracker is not None:
            self._tracker.set_model(self.model)
            self._tracker.on_train_begin(logs)
        else:
            self.position.require_tracker("BackupAndRestore(position=...)")
        divergence.start(self.model)
        if distributed.is_chief():
            self.store.remove_stale()
            self._trackable = checkpointing.trackable_for(self.model)
        if self.preemption:
            shared = signals.process_flag()  # the trainer's process notes SIGTERM from its setup on
            if shared is not None:
                self.signal_flag = shared  # a signal before this fit is pending here: the first check stops
                shared.watch()
            else:  # alone in a model.fit: from now on
                self.signal_flag.install()
            self._agreement = StopAgreement(distributed.allreduce_sum, is_root=distributed.is_chief(),
                                            names=lambda: distributed.cycled_name("hvdkeras.preemption"),
                                            interval_s=self.check_interval_s)

    def on_epoch_begin(self, epoch, logs=None):
        """Its own position: at epoch index ``epoch``."""
        if self._tracker is not None:
            self._tracker.on_epoch_begin(epoch, logs)

    def on_train_batch_end(self, batch, logs=None):
        """With ``preemption``: counts the batch and stops every rank here once they agree on a signal."""
        if self._agreement is None:
            return
        if self._tracker is not None:
            self._tracker.on_train_batch_end(batch, logs)
        steps = (self.params or {}).get("steps") or 0
        if not self._agreement.decide(self.signal_flag.pending):
            return
        self._agreement = None
        if steps and batch + 1 >= steps:
            # The epoch's last batch: its validation, metrics and epoch-end callbacks still run, then
            # on_epoch_end writes a whole-epoch checkpoint and fit stops; the rerun starts the next epoch.
            self._stop_at_epoch_end = True
            self.model.stop_training = True
            return
        raise Preempted(self._preempt(self.position.epoch, self.position.batch, {}))

    def on_epoch_end(self, epoch, logs=None):
        """Saves every ``every_epochs`` epochs and the last (rank 0), after the ranks' weights are compared."""
        if self._tracker is not None:
            self._tracker.on_epoch_end(epoch, logs)
        completed = epoch + 1
        metrics = {k: float(v) for k, v in (logs or {}).items()}
        if self._stop_at_epoch_end:
            self._stop_at_epoch_end = False
            self._preempted_line = self._preempt(completed, 0, metrics)  # Preempted when fit ends
            return
        last = completed == (self.params or {}).get("epochs")
        if not (completed % self.every_epochs == 0 or last):
            return
        if self.check_divergence:  # on every rank, before rank 0 writes
            divergence.check(self.model, f"at the end of epoch {completed}, before its checkpoint")
        if not distributed.is_chief():
            return
        self._save(completed, 0, dict(self._meta(), metrics=metrics))

    def on_train_end(self, logs=None):
        """Leaves after a preemption agreed on an epoch's last batch; else removes backups if asked to."""
        self._agreement = None
        if self._tracker is not None:
            self._tracker.on_train_end(logs)  # a later fit looks again
        if self._preempted_line is not None:
            line, self._preempted_line = self._preempted_line, None
            raise Preempted(line)
        if self.signal_flag is signals.process_flag():  # after the fit, a SIGTERM ends the rank at once again
            self.signal_flag.unwatch()  # (one that came after the last check too: nothing is left to save)
        if self.delete_checkpoint and distributed.is_chief():
            shutil.rmtree(self.backup_dir, ignore_errors=True)

    def save_alone(self) -> Optional[checkpointing.CheckpointInfo]:
        """Rank 0, after a collective failed with a SIGTERM pending: the checkpoint of its last whole batch.

        A rank frozen or lost never joins the agreement to stop, so the ranks cannot checkpoint together;
        rank 0's variables are still those of its last whole batch (the exchange releases a step's
        gradients together: :func:`hvdkeras.gradient_exchange.allreduce.released_together`), and it writes
        them alone: no weight comparison, no broadcast. The batch is the last whose step returned
        (:meth:`hvdkeras.runtime.position.RunPosition.last_step`), whether or not the callbacks counted
        it: the collective that failed may be a callback's, after the step. Only inside an epoch, between
        two batches (not after its last: its validation may have been under way), and with one batch per
        step call (Keras' ``steps_per_execution`` above 1 would leave the variables ahead of the count).
        Returns what it wrote, or ``None`` (another rank, no signal, nothing to add, a failed save).
        """
        at = self.position.last_step((self.params or {}).get("steps"))
        if not (distributed.is_chief() and self.preemption and self.signal_flag.pending and at is not None
                and self._trackable is not None and compat.steps_per_execution(self.model) == 1):
            return None
        epoch, batch = at
        meta = dict(self._meta(), preempted=True, signal=self.signal_flag.signum, metrics={}, alone=True)
        try:
            info = self._write(epoch, batch, meta)
        except CheckpointError as exc:
            log.warning(f"{exc}; the rerun resumes from the checkpoint before")
            return None
        log.info(f"rank 0 wrote the checkpoint of epoch {epoch + 1}, batch {batch} alone: {info.path}")
        return info

    # ------------------------------------------------------------------ saving

    def _meta(self) -> dict:
        return {"global_step": int(self.model.optimizer.iterations.numpy()), "num_ranks": distributed.size(),
                "hvdkeras_version": hvdkeras.__version__, "saved_at": time.time()}

    def _write(self, epoch: int, batch: int, meta: dict) -> checkpointing.CheckpointInfo:
        """Rank 0 writes a checkpoint and records it as the run's last save."""
        info = self.store.save(epoch, self._trackable, meta, batch=batch)
        self.position.saved(info)
        return info

    def _save(self, epoch: int, batch: int, meta: dict) -> Optional[checkpointing.CheckpointInfo]:
        try:
            return self._write(epoch, batch, meta)
        except CheckpointError as exc:
            if self.on_save_error == "stop":
                raise
            log.warning(f"{exc}; training continues (checkpoint.on_save_error=continue)")
            return None

    def _preempt(self, epoch: int, batch: int, metrics: dict) -> str:
        """Collective: rank 0 writes the preemption checkpoint at ``epoch`` completed epochs and ``batch``
        batches of the next, every rank learns its path and prints the line it returns (to leave with)."""
        if self.check_divergence:
            where = f"epoch {epoch + 1}, batch {batch}" if batch else f"the end of epoch {epoch}"
            divergence.check(self.model, f"at {where}, before the preemption checkpoint")
        outcome: Union[str, CheckpointError, None] = None
        if distributed.is_chief():
            try:
                meta = dict(self._meta(), preempted=True, signal=self.signal_flag.signum, metrics=metrics)
                outcome = self._write(epoch, batch, meta).path
            except CheckpointError as exc:
                outcome = exc
        outcome = distributed.broadcast_object(outcome, name="hvdkeras.preempted")
        if isinstance(outcome, Exception):
            raise CheckpointError(f"preempted at epoch {epoch + 1}, batch {batch}, but {outcome}")
        waited = self.signal_flag.seconds_since()
        if waited is not None and waited > self.grace_s:
            log.warning(f"the preemption checkpoint took {waited:.1f}s after the signal, more than"
                        f" checkpoint.preemption_grace_s={self.grace_s:g}")
        where = f"epoch {epoch + 1}, batch {batch}" if batch else f"the end of epoch {epoch}"
        line = f"preempted at {where}; checkpoint written: {outcome}"
        log.stop(line)
        if not distributed.is_chief():
            self._wait_to_leave()  # rank 0 leaves first (see __init__)
        return line
