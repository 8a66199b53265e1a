"""A model you can ship: at the end of training rank 0 writes ``<workdir>/export/``.

::

    <workdir>/export/model.keras     the trained model, Keras' own format: keras.models.load_model(path,
                                     compile=False) on the same stack, without hvdkeras installed
    <workdir>/export/saved_model/    a TensorFlow SavedModel with a serving signature (Model.export):
                                     TensorFlow Serving, tf.saved_model.load(path).serve(x)

Each is written beside its place and moved in by rename (:func:`hvdkeras.common.workdir.atomic_save`),
so a reader sees the previous export or the complete new one. ``trainer.export: false`` skips
both. The Estimator path (``trainer.api: estimator``) exports through its own
``export_saved_model``, not here.
"""
from __future__ import annotations

import os
from typing import Dict

from hvdkeras.common.workdir import EXPORT_DIR, atomic_save
from hvdkeras.runtime import compat

KERAS_FILE = "model.keras"
SAVED_MODEL_DIR = "saved_model"


def paths(workdir: str) -> Dict[str, str]:
    """``{"keras": <workdir>/export/model.keras, "saved_model": <workdir>/export/saved_model}``."""
    folder = os.path.join(workdir, EXPORT_DIR)
    return {"keras": os.path.join(folder, KERAS_FILE), "saved_model": os.path.join(folder, SAVED_MODEL_DIR)}


def export(model, workdir: str) -> Dict[str, str]:
    """Writes ``model`` as ``model.keras`` and as a SavedModel into ``<workdir>/export/`` (rank 0 alone calls it);
    returns their paths.

    The ``.keras`` file holds the architecture and the weights; it is loaded with
    ``compile=False`` (the optimizer it was trained with is hvdkeras's distributed one).
    """
    where = paths(workdir)
    atomic_save(where["keras"], model.save)
    atomic_save(where["saved_model"], lambda tmp: compat.export_saved_model(model, tmp))
    return where
