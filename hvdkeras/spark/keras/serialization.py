"""A Keras model as the bytes of a ``.keras`` file and back: what travels to the ranks and the Python workers.

A leaf: Keras only (through :mod:`hvdkeras.runtime.compat`), nothing of Spark or Horovod.
"""
from __future__ import annotations

import os
import tempfile
from typing import Any, Dict, Optional

from hvdkeras.runtime.compat import keras

MODEL_SUFFIX = ".keras"


def model_to_bytes(model: Any) -> bytes:
    """``model`` as the bytes of a ``.keras`` file (architecture and weights)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model" + MODEL_SUFFIX)
        model.save(path)
        with open(path, "rb") as f:
            return f.read()


def model_from_bytes(blob: bytes, custom_objects: Optional[Dict[str, Any]] = None, safe_mode: bool = True) -> Any:
    """The model that :func:`model_to_bytes` wrote, not compiled; ``safe_mode``: Keras' (False loads a ``Lambda``'s
    bytecode)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model" + MODEL_SUFFIX)
        with open(path, "wb") as f:
            f.write(blob)
        return keras.models.load_model(path, custom_objects=custom_objects or {}, compile=False, safe_mode=safe_mode)
