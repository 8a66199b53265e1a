"""One JSON line per epoch, for machines: ``metrics.jsonl`` written by rank 0."""
from __future__ import annotations

import time
from typing import Optional

from hvdkeras.common.workdir import append_metrics, keep_metrics_through
from hvdkeras.runtime import distributed
from hvdkeras.runtime.compat import keras


class JsonlMetricsLogger(keras.callbacks.Callback):
    """Appends ``{"epoch": ..., <every log value>, "epoch_time_s": ...}`` per epoch.

    ``epoch`` counts completed epochs (1 is the first); ``epoch_time_s`` includes
    validation. The log values include whatever earlier callbacks added (``lr``,
    :class:`ThroughputLogger`'s rates). Only rank 0 writes. Each line is flushed
    and fsynced. When ``fit`` starts at epoch ``k`` (``initial_epoch=k``), lines for
    epochs after ``k`` (logged before a crash but not checkpointed) are dropped
    first, so the file never repeats an epoch. Place it after
    :class:`MetricAverageCallback`.

    Args:
        path: the file the lines are appended to (rank 0 writes it).
    """

    def __init__(self, path: str):
        super().__init__()
        self.path = path
        self._epoch_start: Optional[float] = None
        self._first_epoch = True

    def on_train_begin(self, logs=None):
        """Marks the coming epoch as this ``fit``'s first."""
        self._first_epoch = True

    def on_epoch_begin(self, epoch, logs=None):
        """Starts the epoch's clock; at ``fit``'s first epoch, rank 0 drops lines for later epochs."""
        if self._first_epoch and distributed.is_chief():
            keep_metrics_through(self.path, epoch)  # fit(initial_epoch=epoch) resumes here
        self._first_epoch = False
        self._epoch_start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        """Appends the epoch's line on rank 0."""
        self._epoch_start, start = None, self._epoch_start
        if not distributed.is_chief() or start is None:
            return
        record = {"epoch": epoch + 1}
        record.update({k: float(v) for k, v in (logs or {}).items()})
        record["epoch_time_s"] = round(time.perf_counter() - start, 4)
        append_metrics(self.path, record)
