"""hvdkeras: correct-by-default data-parallel Keras training on Horovod.

Entry points: ``python -m hvdkeras.train`` (command line), :class:`hvdkeras.trainer.Trainer`
(library) and :mod:`hvdkeras.callbacks` (for your own ``model.fit``).
"""

__version__ = "0.1.0"
