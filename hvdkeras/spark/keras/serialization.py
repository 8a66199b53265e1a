"""A Keras model as the bytes of a ``.keras`` file and back: what travels to the ranks and the Python workers.

A leaf: Keras only (through :mod:`hvdkeras.runtime.compat`), nothing of Spark or Horovod. In safe mode the
archive's ``config.json`` is read before Keras reads it, for the modules it names.
"""
from __future__ import annotations

import io
import json
import os
import tempfile
import zipfile
from typing import Any, Collection, Dict, List, Optional

from hvdkeras.common import installed
from hvdkeras.runtime.compat import keras

MODEL_SUFFIX = ".keras"


def model_to_bytes(model: Any) -> bytes:
    """``model`` as the bytes of a ``.keras`` file (architecture and weights)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model" + MODEL_SUFFIX)
        model.save(path)
        with open(path, "rb") as f:
            return f.read()


def named_modules(blob: bytes, given: Collection[str] = ()) -> List[str]:
    """The modules a ``.keras`` file's ``config.json`` names for its objects (``module`` beside a ``class_name``),
    other than Keras' own and Python's builtins, which Keras resolves itself, and those of the objects ``given``
    by name (``custom_objects``), which Keras takes from there without importing; each once, in order.

    None for bytes that are not a ``.keras`` archive with a JSON ``config.json``, which Keras then loads (or
    refuses) without importing what they name.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as archive:
            config = json.loads(archive.read("config.json").decode("utf-8"))
    except (zipfile.BadZipFile, KeyError, ValueError, RecursionError, OSError):
        return []  # not a .keras archive (an H5 model, say): Keras reads it without importing a module it names
    found: List[str] = []
    stack = [config]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            module = node.get("module")
            # What Keras looks its custom_objects up by, before it imports anything: a function's name (its config),
            # else the registered name (the class name when the config has none; a built-in's is null)
            key = node.get("config") if node.get("class_name") == "function" else node.get(
                "registered_name", node.get("class_name"))
            by_name = isinstance(key, str) and key in given
            if (isinstance(module, str) and "class_name" in node and not _keras_own(module) and not by_name
                    and module not in found):
                found.append(module)
            stack.extend(reversed(list(node.values())))
        elif isinstance(node, list):
            stack.extend(reversed(node))
    return found


def _keras_own(module: str) -> bool:
    return module in ("keras", "builtins", "tf_keras") or module.startswith(("keras.", "tf_keras."))


def model_from_bytes(blob: bytes, custom_objects: Optional[Dict[str, Any]] = None, safe_mode: bool = True) -> Any:
    """The model that :func:`model_to_bytes` wrote, not compiled; ``safe_mode``: Keras' (False loads a ``Lambda``'s
    bytecode), and each module the archive names must come from an installed package
    (:func:`hvdkeras.common.installed.check`: Keras 2.15 imports whatever module a ``config.json`` names, also in
    its safe mode), unless ``custom_objects`` gives its object by name, which Keras then takes without importing.

    Raises:
        SetupError: in safe mode, the archive names a module found outside the installed packages.
    """
    if safe_mode:
        for module in named_modules(blob, given=set(custom_objects or {})):
            installed.check(module, "the saved model's config.json")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model" + MODEL_SUFFIX)
        with open(path, "wb") as f:
            f.write(blob)
        return keras.models.load_model(path, custom_objects=custom_objects or {}, compile=False, safe_mode=safe_mode)
