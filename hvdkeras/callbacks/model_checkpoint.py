"""Keras' ``ModelCheckpoint``, written by rank 0 only, atomically, with a cap on how many are kept."""
from __future__ import annotations

import os
import shutil
from typing import List, Optional

import numpy as np

from hvdkeras.callbacks import divergence
from hvdkeras.common import log
from hvdkeras.common.workdir import atomic_save
from hvdkeras.runtime import compat, distributed
from hvdkeras.runtime.compat import keras


def _remove_saved(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.exists(path):
        os.remove(path)
    else:  # a weights prefix
        directory, base = os.path.split(os.path.abspath(path))
        for name in os.listdir(directory) if os.path.isdir(directory) else []:
            if name == f"{base}.index" or name.startswith(f"{base}.data-"):
                os.remove(os.path.join(directory, name))


class ModelCheckpoint(keras.callbacks.Callback):
    """Saves the model or its weights like Keras' ``ModelCheckpoint``; same arguments, plus ``keep`` and
    ``check_divergence``.

    Rule enforced: only rank 0 writes, so ranks never race on one file; each save
    appears complete or not at all (written beside the target, then renamed);
    ``save_best_only`` compares the metric in the logs, which are global when
    :class:`MetricAverageCallback` runs before this callback, so "best" means best
    over all ranks' data. ``keep=N`` deletes the oldest files this callback wrote
    once more than ``N`` exist (``None``: keep all).

    ``check_divergence`` (on by default): at every save point (every epoch end, or every
    ``save_freq`` batches), whether or not ``save_best_only`` then saves, the ranks first
    compare their trainable weights (:func:`hvdkeras.callbacks.divergence.check`, skipped
    when an earlier callback compared them at the same step); weights that differ between
    ranks stop every rank with one line and are not written. Every rank must run this
    callback (rank 0 alone writes); on rank 0 alone, pass ``check_divergence=False``.

    ``filepath`` may contain ``{epoch}``, ``{batch}`` (with an integer
    ``save_freq``) and any log key, e.g. ``"ckpt/w-{epoch:03d}-{val_loss:.3f}.weights.h5"``
    (Keras 3 needs ``.weights.h5`` for weights and ``.keras`` or ``.h5`` for models;
    these names work on Keras 2 too).

    Args:
        filepath: where to save, with ``{epoch}``, ``{batch}`` and log keys filled in (``None``: set
            ``callback.filepath`` before ``fit``).
        monitor: the log key ``save_best_only`` compares.
        verbose: ``1``: a line for each save, and for each save point whose ``monitor`` did not improve.
        save_best_only: save only when ``monitor`` improved on the best so far.
        save_weights_only: save the weights only, not the whole model.
        mode: ``"min"`` or ``"max"``: which way ``monitor`` improves; ``"auto"``: ``"max"`` for an
            accuracy, an AUC or an F-measure, else ``"min"``.
        save_freq: ``"epoch"``: at every epoch end; a number: every that many batches.
        options: passed to Keras' save as ``options`` (``None``: none).
        initial_value_threshold: the value ``monitor`` must improve on before the first save with
            ``save_best_only`` (``None``: any value).
        keep: how many of the files this callback wrote it keeps, deleting the oldest (``None``: all).
        check_divergence: compare the ranks' trainable weights at every save point first.
    """

    def __init__(self, filepath, monitor: str = "val_loss", verbose: int = 0, save_best_only: bool = False,
                 save_weights_only: bool = False, mode: str = "auto", save_freq="epoch", options=None,
                 initial_value_threshold: Optional[float] = None, keep: Optional[int] = None,
                 check_divergence: bool = True):
        super().__init__()
        if mode not in ("auto", "min", "max"):
            raise ValueError(f"mode must be 'auto', 'min' or 'max'. Received: mode={mode!r}")
        if save_freq != "epoch" and not (isinstance(save_freq, int) and save_freq > 0):
            raise ValueError("save_freq must be 'epoch' or a positive integer (batches). "
                             f"Received: save_freq={save_freq!r}")
        if keep is not None and keep < 1:
            raise ValueError(f"keep must be a positive integer or None. Received: keep={keep!r}")
        self.filepath = None if filepath is None else os.fspath(filepath)  # None: set before fit
        if self.filepath is not None:
            compat.check_save_path(self.filepath, save_weights_only)
        self.monitor = monitor
        self.verbose = verbose
        self.save_best_only = save_best_only
        self.save_weights_only = save_weights_only
        self.save_freq = save_freq
        self.options = options
        self.keep = keep
        self.check_divergence = check_divergence
        if mode == "auto":
            mode = "max" if ("acc" in monitor or monitor.startswith("fmeasure") or "auc" in monitor) else "min"
        self.monitor_op = np.greater if mode == "max" else np.less
        if initial_value_threshold is not None:
            self.best = initial_value_threshold
        else:
            self.best = -np.inf if mode == "max" else np.inf
        self.written: List[str] = []
        self._epoch = 0
        self._batches_seen = 0

    def _implements_train_batch_hooks(self):
        return self.save_freq != "epoch"

    def on_train_begin(self, logs=None):
        """Checks that ``filepath`` is set and fits the save format; prepares the divergence check."""
        if self.filepath is None:
            raise ValueError(f"{type(self).__name__} has no filepath: set `callback.filepath` (for example "
                             "'best.keras') before fit. Received: filepath=None")
        compat.check_save_path(os.fspath(self.filepath), self.save_weights_only)
        divergence.start(self.model)

    def on_epoch_begin(self, epoch, logs=None):
        """Notes the epoch, for saves every ``save_freq`` batches."""
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        """Saves every ``save_freq`` batches (an integer ``save_freq``)."""
        if self.save_freq == "epoch":
            return
        self._batches_seen += 1
        if self._batches_seen % self.save_freq == 0:
            self._save(self._epoch, batch, logs)

    def on_epoch_end(self, epoch, logs=None):
        """Saves at the epoch's end (``save_freq='epoch'``)."""
        if self.save_freq == "epoch":
            self._save(epoch, None, logs)

    def _path(self, epoch: int, batch: Optional[int], logs) -> str:
        values = dict(logs or {})
        values["epoch"] = epoch + 1
        if batch is not None:
            values["batch"] = batch + 1
        assert self.filepath is not None  # on_train_begin refuses a fit without one
        try:
            return self.filepath.format(**values)
        except (KeyError, IndexError, ValueError) as exc:
            raise KeyError(
                f'Failed to format this callback filepath: "{self.filepath}". Reason: {exc!r}; available keys:'
                f" {', '.join(sorted(values))}"
            ) from None

    def _save(self, epoch: int, batch: Optional[int], logs) -> None:
        logs = logs or {}
        if self.check_divergence:  # on every rank at every save point, before any rank decides alone
            where = f"epoch {epoch + 1}, batch {batch + 1}" if batch is not None else f"the end of epoch {epoch + 1}"
            divergence.check(self.model, f"at {where}, before the checkpoint")
        if self.save_best_only:
            current = logs.get(self.monitor)
            if current is None:
                log.info(f"ModelCheckpoint: can save best model only with {self.monitor} available; skipping"
                         f" (available: {', '.join(sorted(logs))})")
                return
            if not self.monitor_op(current, self.best):
                if self.verbose:
                    log.info(f"Epoch {epoch + 1}: {self.monitor} did not improve from {self.best:.5f}")
                return
            previous, self.best = self.best, current  # the same decision on every rank: logs are global
        if not distributed.is_chief():
            return
        path = self._path(epoch, batch, logs)
        if self.verbose:
            why = f"{self.monitor} improved from {previous:.5f} to {current:.5f}, " if self.save_best_only else ""
            log.info(f"Epoch {epoch + 1}: {why}saving model to {path}")
        kwargs = {"overwrite": True} if self.options is None else {"overwrite": True, "options": self.options}
        save = self.model.save_weights if self.save_weights_only else self.model.save
        atomic_save(path, lambda tmp: save(tmp, **kwargs))
        if path in self.written:
            self.written.remove(path)
        self.written.append(path)
        while self.keep is not None and len(self.written) > self.keep:
            _remove_saved(self.written.pop(0))


class BestModelCheckpoint(ModelCheckpoint):
    """Horovod's ``BestModelCheckpoint``: a :class:`ModelCheckpoint` that keeps the best model only.

    Same arguments as Horovod's; the file name is set afterwards (``callback.filepath =
    "best.keras"``), as Horovod's estimators do, or given as ``filepath=``; ``check_divergence`` as in
    :class:`ModelCheckpoint`.
    """

    def __init__(self, monitor: str = "val_loss", verbose: int = 0, save_weights_only: bool = False,
                 mode: str = "auto", save_freq="epoch", filepath=None, check_divergence: bool = True):
        super().__init__(filepath, monitor=monitor, verbose=verbose, save_best_only=True,
                         save_weights_only=save_weights_only, mode=mode, save_freq=save_freq,
                         check_divergence=check_divergence)
