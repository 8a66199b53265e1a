"""A TensorFlow profiler trace of a few training batches, written by rank 0 for TensorBoard's Profile tab."""
from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from hvdkeras.common import log
from hvdkeras.runtime import distributed
from hvdkeras.runtime.compat import keras


class ProfileBatches(keras.callbacks.Callback):
    """Traces training batches ``start`` to ``stop`` (counted from 1 over this ``fit``, across epochs) with
    ``tf.profiler`` on rank 0, into ``<log_dir>/plugins/profile/<time>/`` (open ``log_dir`` in TensorBoard with
    the profile plugin, ``pip install tensorboard-plugin-profile``). The other ranks do nothing. A ``fit``
    that ends before ``stop`` writes the batches it ran.

    ``runtime.profile_batches: [start, stop]`` adds it to the config path with ``log_dir`` the
    run's ``tensorboard/`` folder.

    Args:
        log_dir: the folder the trace goes into.
        batches: ``(start, stop)``, the first and the last training batch traced, counted from 1.
    """

    def __init__(self, log_dir: str, batches: Sequence[int]):
        super().__init__()
        batches = tuple(batches)
        if len(batches) != 2 or not all(isinstance(b, int) for b in batches) or not 1 <= batches[0] <= batches[1]:
            raise ValueError(f"batches must be (start, stop) with 1 <= start <= stop; Received: batches={batches!r}")
        self.log_dir = log_dir
        self.start, self.stop = batches
        self._seen = 0
        self._tracing = False

    def _implements_train_batch_hooks(self):
        return distributed.is_chief() and self._seen < self.stop

    def on_train_begin(self, logs=None):
        """Restarts the batch count for this ``fit``."""
        self._seen = 0

    def on_train_batch_begin(self, batch, logs=None):
        """Counts the batch on rank 0 and starts the trace at batch ``start``."""
        if not distributed.is_chief():
            return
        self._seen += 1
        if self._seen == self.start:
            tf.profiler.experimental.start(self.log_dir)
            self._tracing = True

    def on_train_batch_end(self, batch, logs=None):
        """Stops the trace after batch ``stop``."""
        if self._tracing and self._seen >= self.stop:
            self._finish()

    def on_train_end(self, logs=None):
        """Stops a trace still running when ``fit`` ends before ``stop``."""
        if self._tracing:
            self._finish()

    def _finish(self):
        tf.profiler.experimental.stop()
        self._tracing = False
        log.info(f"profiled training batches {self.start}-{min(self._seen, self.stop)} into"
                 f" {self.log_dir}/plugins/profile")
