"""hvdkeras: correct-by-default data-parallel Keras training on Horovod.

Entry points: ``python -m hvdkeras.train`` (command line), :class:`hvdkeras.trainer.Trainer`
(library), :mod:`hvdkeras.callbacks` and :func:`hvdkeras.DistributedOptimizer` (for your own
``model.fit``, the same call on Keras 2 and Keras 3).
"""

__version__ = "0.1.0"


def __getattr__(name):
    # ``from hvdkeras import DistributedOptimizer`` without importing TensorFlow at ``import hvdkeras``.
    if name == "DistributedOptimizer":
        from hvdkeras.gradient_exchange import DistributedOptimizer

        return DistributedOptimizer
    raise AttributeError(f"module 'hvdkeras' has no attribute {name!r}")
