"""Keras' logging callbacks that write on rank 0 and do nothing, at no cost, elsewhere."""
from __future__ import annotations

from hvdkeras.runtime import compat, distributed
from hvdkeras.runtime.compat import keras

_HOOKS = (
    "set_model", "on_train_begin", "on_train_end", "on_epoch_begin", "on_epoch_end",
    "on_batch_begin", "on_batch_end", "on_train_batch_begin", "on_train_batch_end",
    "on_test_begin", "on_test_end", "on_test_batch_begin", "on_test_batch_end",
    "on_predict_begin", "on_predict_end", "on_predict_batch_begin", "on_predict_batch_end",
)
_BATCH_HOOK_QUERIES = ("_implements_train_batch_hooks", "_implements_test_batch_hooks",
                       "_implements_predict_batch_hooks")


def _chief_only(base: type, rule: str) -> type:
    """A subclass of ``base`` whose hooks run on rank 0 only."""

    def make_hook(name):
        def hook(self, *args, **kwargs):
            if distributed.is_chief():
                return getattr(super(cls, self), name)(*args, **kwargs)
            if name == "set_model":  # keep the reference Keras code may expect, create nothing
                keras.callbacks.Callback.set_model(self, args[0] if args else kwargs.get("model"))
            return None

        hook.__name__ = name
        return hook

    def make_query(name):
        def query(self):
            return distributed.is_chief() and getattr(super(cls, self), name)()

        query.__name__ = name
        return query

    namespace = {name: make_hook(name) for name in _HOOKS if hasattr(base, name)}
    namespace.update({name: make_query(name) for name in _BATCH_HOOK_QUERIES if hasattr(base, name)})
    namespace["__doc__"] = f"Keras' ``{base.__name__}``, same arguments. {rule}"
    namespace["__module__"] = __name__
    cls = type(base.__name__, (base,), namespace)
    return cls


class _GlobalTensorBoard(keras.callbacks.TensorBoard):
    """Keras' TensorBoard without the scalars only this rank's data made.

    At the end of each validation Keras writes ``evaluation_<metric>_vs_iterations``
    from the ``on_test_end`` logs, which no callback averages over ranks: with more
    than one rank they would be rank 0's shard alone, so they are left out (the
    ``epoch_<metric>`` scalars of the validation run hold the global values).
    """

    def __init__(self, *args, **kwargs):
        if not compat.TENSORBOARD_INSTALLED:
            raise ImportError(f"the TensorBoard callback needs the tensorboard package, which TensorFlow "
                              f"{compat.tf.__version__} does not install: pip install tensorboard")
        super().__init__(*args, **kwargs)

    def on_test_end(self, logs=None):
        if distributed.size() > 1:
            self._pop_writer()  # what Keras does after writing them
            return None
        return super().on_test_end(logs)


_GlobalTensorBoard.__name__ = _GlobalTensorBoard.__qualname__ = "TensorBoard"

TensorBoard = _chief_only(
    _GlobalTensorBoard,
    "Rule enforced: only rank 0 writes event files; other ranks run none of its hooks. Put it after "
    "MetricAverageCallback (with the same ``batch_frequency`` as ``update_freq``) to record global metrics; "
    "with more than one rank the per-rank ``evaluation_<metric>_vs_iterations`` scalars are not written. "
    "Epoch-end log entries that earlier callbacks add (``lr``, :class:`ThroughputLogger`'s "
    "``<unit>_per_sec``) become scalars too.")
CSVLogger = _chief_only(
    keras.callbacks.CSVLogger,
    "Rule enforced: only rank 0 opens and writes the file. Put it after MetricAverageCallback.")
ProgbarLogger = _chief_only(
    keras.callbacks.ProgbarLogger,
    "Rule enforced: only rank 0 prints, even when every rank passes ``verbose=1`` to ``fit`` (Keras does not add "
    "its own bar when one is in the list). Put it after MetricAverageCallback so the epoch line shows global "
    "metrics.")
