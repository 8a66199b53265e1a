"""Exact cross-rank metrics: one global value per metric, counted over all examples."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from hvdkeras.runtime import compat, distributed
from hvdkeras.runtime.compat import keras


def _metric_states(metrics: Sequence) -> List[np.ndarray]:
    return [np.asarray(v.numpy(), dtype=np.float64) for m in metrics for v in m.variables]


def _value(result):
    value = np.asarray(result)
    return float(value) if value.size == 1 else value


def _result_keys(metrics: Sequence) -> set:
    """The log keys the metrics' results go under (a metric's result may be a dict of several)."""
    return {key for m in metrics for key in compat.metric_results(m)}


def _results_from_states(metrics: Sequence, states: Sequence[np.ndarray]) -> Dict[str, float]:
    """The metrics' results (by log key) as if their variables held ``states``; leaves them unchanged."""
    results = {}
    i = 0
    for m in metrics:
        variables = list(m.variables)
        saved = [v.numpy() for v in variables]
        for v, s in zip(variables, states[i:i + len(variables)]):
            v.assign(s.astype(compat.dtype(v).as_numpy_dtype).reshape(v.shape))
        results.update({key: _value(r) for key, r in compat.metric_results(m).items()})
        for v, s in zip(variables, saved):
            v.assign(s)
        i += len(variables)
    return results


def _flatten(arrays: Sequence[np.ndarray]) -> Tuple[np.ndarray, List[Tuple[int, ...]]]:
    shapes = [a.shape for a in arrays]
    flat = np.concatenate([a.reshape(-1) for a in arrays]) if arrays else np.zeros(0)
    return flat, shapes


def _unflatten(flat: np.ndarray, shapes: Sequence[Tuple[int, ...]]) -> List[np.ndarray]:
    out, i = [], 0
    for shape in shapes:
        n = int(np.prod(shape)) if shape else 1
        out.append(flat[i:i + n].reshape(shape))
        i += n
    return out


def global_results(metrics: Sequence, name: str = "hvdkeras.metrics") -> Dict[str, float]:
    """Each metric's result over the union of all ranks' data (collective).

    The metric's state variables (``total`` and ``count`` for means, confusion
    counts for precision or AUC, ...) are summed over ranks and the result is computed
    from the sums. For every built-in Keras metric this is the value one process would
    get on all the data: uneven shards are exact, unlike a mean of per-rank means. A model
    of several outputs has a loss metric and metrics per output (``<output>_loss``,
    ``<output>_<metric>``), each summed alike.
    """
    states = _metric_states(metrics)
    flat, shapes = _flatten(states)
    summed = _unflatten(distributed.allreduce_sum(flat, name=name), shapes)
    return _results_from_states(metrics, summed)


class MetricAverageCallback(keras.callbacks.Callback):
    """Replaces every epoch-end log value with its value over all ranks' examples.

    Rule enforced: callbacks that run after this one (checkpoint choice, early
    stopping, loggers) see the same, global numbers on every rank. Training metrics
    are read as the training loop left them (just before validation resets them),
    validation metrics after validation; both are reduced in one collective per
    epoch, in the same order on every rank. Log entries that are not metrics of the
    model (for example ``lr``) are averaged over ranks.

    With ``batch_frequency=N`` it also replaces the training values in the batch logs
    every ``N`` batches (one collective each time, at the same batches on every
    rank), so TensorBoard with ``update_freq=N`` placed after it records global
    values.

    Place it before any callback that reads the logs. The ``ProgbarLogger`` Keras adds
    by itself runs first, so pass ``verbose=0`` to ``fit`` and add
    ``keras.callbacks.ProgbarLogger`` after this callback on rank 0 (the trainer does).

    Args:
        device: the device the reductions run on (Horovod's argument; ``""``: TensorFlow's choice).
        batch_frequency: also make the batch logs' training values global every this many batches
            (``None``: at epoch ends only).
    """

    def __init__(self, device: str = "", batch_frequency: Optional[int] = None):
        super().__init__()
        self.device = device  # where the allreduce runs (Horovod's argument)
        if batch_frequency is not None and batch_frequency < 1:
            raise ValueError(f"batch_frequency must be >= 1 or None; received: batch_frequency={batch_frequency}")
        self.batch_frequency = batch_frequency
        self._in_epoch = False
        self._train_states: Optional[List[np.ndarray]] = None
        self._epoch = 0

    def set_model(self, model):
        """Sets the model and makes Keras 3 count each output loss's examples, so sums over ranks are exact."""
        super().set_model(model)
        # Keras 3 counts a batch of unknown size once in each output's loss (<output>_loss): count its examples
        compat.count_examples_in_output_losses(model)

    def _implements_train_batch_hooks(self):
        return self.batch_frequency is not None

    def on_train_batch_end(self, batch, logs=None):
        """Every ``batch_frequency`` batches, replaces the batch logs' training values with global ones."""
        if self.batch_frequency is None or not logs or (batch + 1) % self.batch_frequency:
            return
        with compat.tf.device(self.device):
            results = global_results(self.model.metrics, name=f"hvdkeras.batch_metrics.{self._epoch}.{batch}")
        for key in logs:
            if key in results:
                logs[key] = results[key]

    def on_epoch_begin(self, epoch, logs=None):
        """Notes the epoch and that training metrics are being accumulated."""
        self._epoch = epoch
        self._in_epoch = True
        self._train_states = None

    def on_test_begin(self, logs=None):
        """Saves the training metrics' state before validation inside ``fit`` resets it."""
        if self._in_epoch:  # validation inside fit: training metrics are about to be reset
            self._train_states = _metric_states(self.model.metrics)

    def on_epoch_end(self, epoch, logs=None):
        """Replaces the epoch's log values with their values over all ranks, in one collective."""
        self._in_epoch = False
        if not logs:
            return
        metrics = list(self.model.metrics)
        names = _result_keys(metrics)
        validated = self._train_states is not None
        train_states = self._train_states if self._train_states is not None else _metric_states(metrics)
        val_states = _metric_states(metrics) if validated else []
        others = sorted(k for k in logs if (k[4:] if k.startswith("val_") else k) not in names)

        flat, shapes = _flatten(list(train_states) + list(val_states) + [np.array([float(logs[k])]) for k in others])
        with compat.tf.device(self.device):
            summed = _unflatten(distributed.allreduce_sum(flat, name=f"hvdkeras.epoch_metrics.{epoch}"), shapes)
        n_train = len(train_states)
        n_val = len(val_states)

        train = _results_from_states(metrics, summed[:n_train])
        val = _results_from_states(metrics, summed[n_train:n_train + n_val]) if validated else {}
        for key in list(logs):
            base = key[4:] if key.startswith("val_") else key
            if key.startswith("val_") and base in val:
                logs[key] = val[base]
            elif not key.startswith("val_") and key in train:
                logs[key] = train[key]
        size = distributed.size()
        for k, total in zip(others, summed[n_train + n_val:]):
            logs[k] = float(total[0]) / size
        self._train_states = None
