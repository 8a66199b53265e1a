"""``RunPosition``: where a run is and how it resumes, in one object.

It owns the checkpoint store (``None`` when checkpoints are off), the position
``(epoch, batch)`` (epochs done, batches done of the next), where the next ``fit``
starts, the checkpoint a resume loaded and the last one saved. The callbacks
(:class:`hvdkeras.callbacks.BackupAndRestore`, the elastic commit), the drivers and
the trainer read the position here; one callback moves it through each ``fit``
(:class:`hvdkeras.callbacks.position_tracker.PositionTracker`, first in the list), and the elastic state rolls it
back or syncs it (:meth:`RunPosition.place`).

Two words, one meaning each across the package: to *restore* is to put a checkpoint's saved values back into
variables (:meth:`hvdkeras.runtime.checkpointing.CheckpointStore.restore`, Horovod's ``State.restore`` of the last
commit, ``BackupAndRestore.restore``); to *resume* is what a run does with them: restore its latest intact
checkpoint and continue from that checkpoint's position (:meth:`RunPosition.resume`).
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

from hvdkeras.common import log
from hvdkeras.runtime import checkpointing, compat, distributed


def _built_optimizer(model: Any) -> Any:
    """``model``'s optimizer with its slots and step created, so that a checkpoint restores them too."""
    optimizer = model.optimizer
    if not compat.optimizer_built(optimizer):
        compat.build_optimizer(optimizer, model.trainable_variables)
    return optimizer


class RunPosition:
    """The position of one run and its checkpoints.

    Args:
        store: where the run's checkpoints are, or ``None`` when checkpointing is off (every
            resume then starts at ``(0, 0)``).
    """

    def __init__(self, store: Optional[checkpointing.CheckpointStore] = None):
        self.store = store
        self.epoch = 0  # the epoch index training is in
        self.batch = 0  # batches of that epoch done
        self.restored: Optional[checkpointing.CheckpointInfo] = None  # what a resume loaded
        self.last_saved: Optional[checkpointing.CheckpointInfo] = None
        self._start: Optional[Tuple[int, int]] = None  # where the next fit starts, once decided
        self._offset = 0  # batches of the current epoch done before this fit (a resumed partial epoch)
        self._ran = 0  # training steps of the current epoch that returned in this fit (step_ran)
        self._begun = False  # begin_fit ran for the fit decided last

    # ------------------------------------------------------------------ resuming

    def resume(self, model: Any) -> Tuple[int, int]:
        """Collective: the run resumes: rank 0 restores the latest intact checkpoint, which is broadcast to every
        rank, and the next ``fit``'s start is decided.

        Builds the optimizer first, so its slots and step are restored too.

        Returns:
            Where training continues, ``(epochs done, batches done of the next)``: ``(0, 0)`` with no
            checkpoint. The next ``fit`` starts there.

        Raises:
            CheckpointError: rank 0 could not load it (on every rank alike).
        """
        optimizer = _built_optimizer(model)
        if self.store is not None:
            self.restored = checkpointing.resume(self.store, checkpointing.trackable_for(model))
        if self.restored is not None:
            distributed.broadcast_variables(model.variables)
            distributed.broadcast_variables(compat.optimizer_variables(optimizer))
        self._start = self.restored.position if self.restored else (0, 0)
        self._new_fit()
        return self._start

    def resume_on_chief(self, model: Any) -> Tuple[int, int]:
        """Rank 0 alone restores the latest intact checkpoint (an elastic state sync shares it); no collective.

        Returns:
            The checkpoint's ``(epoch, batch)`` on rank 0, where its position now is; ``(0, 0)`` on the other
            ranks and with none.
        """
        if self.store is None or not distributed.is_chief():
            return 0, 0
        latest = self.store.latest_intact(warn=log.warning)
        if latest is None:
            return 0, 0
        _built_optimizer(model)
        self.store.restore(latest, checkpointing.trackable_for(model))
        self.restored = latest
        self.place(*latest.position)
        return latest.position

    def existing(self) -> Optional[checkpointing.CheckpointInfo]:
        """Collective: the newest checkpoint rank 0 finds (intact or not), on every rank; ``None`` if none."""
        found = self.store.latest() if self.store is not None and distributed.is_chief() else None
        found = distributed.broadcast_object(found, name="hvdkeras.existing_checkpoint")
        return found if isinstance(found, checkpointing.CheckpointInfo) else None

    def resume_point(self) -> Optional[str]:
        """The checkpoint a rerun would continue from (the last saved, else the one restored), described."""
        saved = self.last_saved or self.restored
        return saved.describe() if saved else None

    # ------------------------------------------------------------------ where fit goes

    def continue_at(self, epoch: int, batch: int = 0) -> None:
        """The next ``fit`` starts at epoch index ``epoch``, its first epoch counted from batch ``batch``
        (a fit over the rest of an interrupted epoch); the weights are taken as they are."""
        self._start = (epoch, batch)
        self._new_fit()

    def _new_fit(self) -> None:
        """The next ``fit`` has not begun."""
        self._begun = False

    @property
    def start(self) -> Tuple[int, int]:
        """Where the next ``fit`` starts, ``(epoch, batch)``: as decided, else ``(0, 0)``."""
        return self._start or (0, 0)

    @property
    def decided(self) -> bool:
        """Whether the next ``fit``'s start is known (:meth:`resume` or :meth:`continue_at` set it)."""
        return self._start is not None

    def begin_fit(self) -> Tuple[int, int]:
        """A ``fit`` starts at the decided position (:meth:`continue_at` or :meth:`resume` first).

        Returns:
            ``(epoch, batch)`` where it starts.
        """
        if self._start is None:
            raise RuntimeError("RunPosition.begin_fit before resume() or continue_at(): the start is unknown")
        self.epoch, self._offset = self._start
        self.batch, self._ran = self._offset, 0
        self._begun = True
        return self._start

    def require_tracker(self, who: str) -> None:
        """Raises ValueError unless a ``fit`` began here: ``who`` reads a position that a
        :class:`hvdkeras.callbacks.position_tracker.PositionTracker` before it must move."""
        if not self._begun:
            raise ValueError(f"{who} reads a shared run position that nothing moves: put"
                             " hvdkeras.callbacks.PositionTracker(position) first in fit's callbacks."
                             " Received: a position whose fit has not begun")

    def end_fit(self) -> None:
        """The ``fit`` ended: a later one decides its start again."""
        self._start = None
        self._new_fit()

    # ------------------------------------------------------------------ moving (PositionTracker's hooks)

    @property
    def here(self) -> Tuple[int, int]:
        """``(epoch, batch)``: the epoch index training is in and the batches of it done."""
        return self.epoch, self.batch

    def place(self, epoch: int, batch: int) -> None:
        """The run is at ``(epoch, batch)`` again: a checkpoint or a committed elastic state put its weights
        there (rolled back, synced or loaded on rank 0)."""
        self.epoch, self.batch = epoch, batch

    def begin_epoch(self, epoch: int) -> None:
        """``fit`` began epoch index ``epoch``."""
        if epoch != self.epoch:
            self.epoch, self.batch = epoch, 0
        self._ran = 0

    def end_batch(self, batch: int) -> None:
        """``fit``'s batch ``batch`` of the current epoch ended (counted from the fit's first batch)."""
        self.batch = self._offset + batch + 1

    def end_epoch(self, epoch: int) -> None:
        """Epoch index ``epoch`` ended: the position is the start of the next."""
        self.epoch, self.batch, self._offset, self._ran = epoch + 1, 0, 0, 0

    def step_ran(self) -> None:
        """A training step of the current epoch returned: its updates ran on this rank
        (:func:`hvdkeras.runtime.compat.count_steps` calls it before any callback sees the batch)."""
        self._ran += 1

    def last_step(self, steps: Optional[int]) -> Optional[Tuple[int, int]]:
        """Where this rank's variables are, by the training steps that returned, when that is between two
        batches of an epoch.

        The callbacks count a batch in their ``on_train_batch_end``; a collective in a callback before
        them can fail after the step's updates ran, so after a failure this, not :attr:`batch`, says
        which batches the variables hold.

        Args:
            steps: the running ``fit``'s steps per epoch (Keras' ``params["steps"]``), ``None`` if unknown.

        Returns:
            ``(epoch, batches done)``; ``None`` before this fit's first step of the epoch and after its
            last (the epoch's end may be under way).
        """
        if self._ran == 0 or (steps and self._ran >= steps):
            return None
        return self.epoch, self._offset + self._ran

    def saved(self, info: checkpointing.CheckpointInfo) -> None:
        """Rank 0 wrote checkpoint ``info``."""
        self.last_saved = info
