"""Training throughput in the epoch logs: examples per second, total and per rank, step time and CPU used."""
from __future__ import annotations

import time
from typing import List, Optional

import numpy as np

from hvdkeras.runtime import distributed
from hvdkeras.runtime.compat import keras


def _examples_seen(model) -> Optional[float]:
    """Examples this rank trained on since the metrics were reset, read from the loss tracker's count.

    Keras updates its ``loss`` mean with the batch size as weight, so its ``count``
    is the number of examples (sample weights do not change it).
    """
    for metric in model.metrics:
        if metric.name == "loss":
            for variable in metric.variables:
                if variable.name.split("/")[-1].startswith("count"):
                    return float(variable.numpy())
    return None


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


class ThroughputLogger(keras.callbacks.Callback):
    """Adds ``<unit>_per_sec`` (all ranks), ``<unit>_per_sec_per_rank``, ``step_time_s``, ``train_time_s``,
    ``cpu_cores_per_rank`` and ``peak_rss_mb`` (the largest peak resident memory of any rank so far).

    Rule enforced: the total is the sum over ranks of each rank's examples divided
    by its training time (validation excluded), reduced in one collective per epoch,
    so every rank logs the same numbers; ``step_time_s`` is the median time of a
    training batch, averaged over ranks; ``cpu_cores_per_rank`` is the CPU time the
    process used while training (all its threads) over the training time, averaged
    over ranks: on a CPU host a value below the rank's thread budget means the rank
    waited (for the network, or for a core another process held). Examples are counted from the loss
    tracker; pass ``batch_size`` (per rank) for models compiled without a loss.
    Put it after :class:`MetricAverageCallback` (which would otherwise average the
    total) and before the loggers that should show it.

    Args:
        unit: what an example is called in the log keys (``<unit>_per_sec``).
        batch_size: each rank's batch, to count the examples of a model compiled without a loss
            (``None``: counted from the loss tracker).
    """

    def __init__(self, unit: str = "examples", batch_size: Optional[int] = None):
        super().__init__()
        self.unit = unit
        self.batch_size = batch_size
        self._start: Optional[float] = None
        self._train_end: Optional[float] = None
        self._examples: Optional[float] = None
        self._batch_start: Optional[float] = None
        self._batch_times: List[float] = []
        self._cpu_start = self._cpu_end = 0.0

    def on_epoch_begin(self, epoch, logs=None):
        """Starts the epoch's wall and CPU clocks."""
        self._start = time.perf_counter()
        self._cpu_start = time.process_time()
        self._train_end = None
        self._examples = None
        self._batch_times = []

    def on_train_batch_begin(self, batch, logs=None):
        """Starts the batch's clock."""
        self._batch_start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        """Records the batch's time."""
        if self._batch_start is not None:
            self._batch_times.append(time.perf_counter() - self._batch_start)

    def _stop_clock(self):
        if self._start is not None and self._train_end is None:
            self._train_end = time.perf_counter()
            self._cpu_end = time.process_time()
            if self.batch_size is not None:
                self._examples = float(self.batch_size * len(self._batch_times))
            else:
                self._examples = _examples_seen(self.model)

    def on_test_begin(self, logs=None):
        """Stops the training clocks: validation is not counted."""
        self._stop_clock()  # validation inside fit: training time ends here

    def on_epoch_end(self, epoch, logs=None):
        """Adds the epoch's rates, times, CPU use and peak memory over all ranks to the logs."""
        self._stop_clock()
        if self._start is None or self._train_end is None:  # the clock stops whenever it started
            return
        train_time = max(self._train_end - self._start, 1e-9)
        rate = (self._examples or 0.0) / train_time
        step = float(np.median(self._batch_times)) if self._batch_times else 0.0
        cores = (self._cpu_end - self._cpu_start) / train_time
        total_rate, total_step, total_time, total_cores = distributed.allreduce_sum(
            np.array([rate, step, train_time, cores]), name=f"hvdkeras.throughput.{epoch}")
        size = distributed.size()
        peak_mb = float(distributed.allreduce_max(np.array([_peak_rss_mb()]), name=f"hvdkeras.rss.{epoch}")[0])
        self._start = None
        if logs is not None:
            if self._examples is not None:
                logs[f"{self.unit}_per_sec"] = float(total_rate)
                logs[f"{self.unit}_per_sec_per_rank"] = float(total_rate / size)
            logs["step_time_s"] = float(total_step / size)
            logs["train_time_s"] = float(total_time / size)
            logs["cpu_cores_per_rank"] = float(total_cores / size)
            logs["peak_rss_mb"] = peak_mb
