"""hvdkeras: correct-by-default data-parallel Keras training on Horovod.

Entry points: ``python -m hvdkeras.train`` (command line), :class:`hvdkeras.training.trainer.Trainer`
(library), :mod:`hvdkeras.callbacks` and :func:`hvdkeras.DistributedOptimizer` (for your own
``model.fit``, the same call on Keras 2 and Keras 3), and :mod:`hvdkeras.keras`, Horovod's Keras
API for Horovod scripts (``import hvdkeras.keras as hvd``).
"""

__version__ = "0.1.0"


def __getattr__(name):
    # ``from hvdkeras import DistributedOptimizer`` without importing TensorFlow at ``import hvdkeras``.
    if name in ("DistributedOptimizer", "PartialDistributedOptimizer"):
        from hvdkeras import gradient_exchange

        return getattr(gradient_exchange, name)
    raise AttributeError(f"module 'hvdkeras' has no attribute {name!r}")
