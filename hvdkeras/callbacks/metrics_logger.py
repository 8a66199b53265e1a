"""One JSON line per epoch, for machines: ``metrics.jsonl`` written by rank 0."""
from __future__ import annotations

import json
import os
import time

from hvdkeras import compat, distributed

keras = compat.keras


def read_metrics(path: str):
    """The records of a ``metrics.jsonl`` file, oldest first."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class JsonlMetricsLogger(keras.callbacks.Callback):
    """Appends ``{"epoch", <every log value>, "lr", "epoch_time_s", "train_time_s", "images_per_sec"}``.

    ``epoch`` counts completed epochs (1 is the first). ``images_per_sec`` is the
    global training throughput: ``steps * global_batch_size / train_time_s``, where
    ``train_time_s`` excludes validation. Only rank 0 writes. Each line is flushed
    and fsynced. When ``fit`` starts at epoch ``k`` (``initial_epoch=k``), lines for
    epochs after ``k`` (logged before a crash but not checkpointed) are dropped
    first, so the file never repeats an epoch. Place it after
    :class:`MetricAverageCallback`.
    """

    def __init__(self, path: str, global_batch_size: int):
        super().__init__()
        self.path = path
        self.global_batch_size = global_batch_size
        self._epoch_start = None
        self._train_end = None
        self._first_epoch = True

    def on_train_begin(self, logs=None):
        self._first_epoch = True

    def _drop_records_after(self, epoch: int) -> None:
        records = read_metrics(self.path)
        kept = [r for r in records if r.get("epoch", 0) <= epoch]
        if len(kept) != len(records):
            tmp = f"{self.path}.tmp"
            with open(tmp, "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in kept)
            os.replace(tmp, self.path)

    def on_epoch_begin(self, epoch, logs=None):
        if self._first_epoch and distributed.is_chief():
            self._drop_records_after(epoch)  # fit(initial_epoch=epoch) resumes here
        self._first_epoch = False
        self._epoch_start = time.perf_counter()
        self._train_end = None

    def on_test_begin(self, logs=None):
        if self._epoch_start is not None and self._train_end is None:
            self._train_end = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        now = time.perf_counter()
        train_end = self._train_end or now
        self._epoch_start, start = None, self._epoch_start
        if not distributed.is_chief() or start is None:
            return
        steps = (self.params or {}).get("steps") or 0
        train_time = train_end - start
        record = {"epoch": epoch + 1}
        record.update({k: float(v) for k, v in (logs or {}).items()})
        record.update({
            "epoch_time_s": round(now - start, 4),
            "train_time_s": round(train_time, 4),
            "images_per_sec": round(steps * self.global_batch_size / train_time, 2) if train_time > 0 else None,
        })
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())
