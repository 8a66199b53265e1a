"""Spark ML persistence of the Keras estimator and its fitted model, in a folder that runs no code when loaded.

A saved folder holds ``metadata`` (one JSON line, as Spark's ``DefaultParamsReader`` reads it) and
``model.keras`` (Keras' own format, loaded in Keras' safe mode). Each parameter in ``metadata`` is plain JSON:

* a JSON value as it is (numbers, strings, booleans, lists; a dict as ``{"$dict": {...}}``);
* a Keras optimizer, loss or metric object as its Keras config (``{"$keras": kind, "config": {...}}``);
* a class or function (a custom object, a loss function, Horovod's compression) by its import path
  (``{"$import": "package.module:name"}``), loaded by importing it, from an installed package only
  (:mod:`hvdkeras.common.installed`: a module found in the working directory, the saved folder or another folder
  not installed is refused in one line, unless it is already imported); one the running script defines by its
  name there (``"__main__:name"``, as Keras saves it), loaded from the script that loads, which must define it too;

The estimator's store and backend are not saved (a loaded one is given them again). Anything else that is not
one of these (a callback object) is refused when saving, in one line naming the parameter. Folders
saved by earlier versions hold pickles, which run code when loaded: they load only with ``safe_mode=False``.
"""
from __future__ import annotations

import importlib
import json
import time
from typing import Any, Dict, Sequence

from pyspark.ml.util import MLReader, MLWriter

from hvdkeras.common import installed
from hvdkeras.common.errors import SetupError
from hvdkeras.spark.common.store import Store

FORMAT = "hvdkeras-json-1"  # metadata["format"]; absent in the earlier, pickled format
# Parameters saved as Keras serializes them (see task.to_portable), by the kind of object they hold.
PORTABLE = {"optimizer": "optimizer", "loss": "loss", "metrics": "metric"}
MODEL_FILE = "model.keras"


class _UnsaveableError(Exception):
    """A value that has no JSON form here; the message says what it is."""


def _import_path(value: Any) -> str:
    """``module:qualname`` of a class or function that importing finds again, else :class:`_UnsaveableError`.

    One of the running script's own (``__main__``), as Horovod's examples define their custom metric and activation,
    is ``__main__:qualname``: by its name, as Keras saves it, found again when the script that loads defines it."""
    module, name = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if not module or not name or "<" in name:
        raise _UnsaveableError(f"{value!r} is defined in {module or 'no module'} ({name}), where importing cannot find"
                          " it again; define it in a module of your own package")
    try:
        found = _resolve(f"{module}:{name}")
    except (ImportError, AttributeError):
        found = None
    if found is not value:
        raise _UnsaveableError(f"{module}:{name} does not import as {value!r}")
    return f"{module}:{name}"


def _resolve(path: str) -> Any:
    """The object at import path ``module:qualname``; ``__main__``'s is the running script's (imports nothing).

    Raises:
        SetupError: the module would be imported from outside the installed packages (:func:`installed.check`).
    """
    module, _, name = path.partition(":")
    if module != "__main__":
        installed.check(module, f"$import {path[:200]!r}")
    found: Any = importlib.import_module(module)
    for part in name.split("."):
        if module == "__main__" and not hasattr(found, part):
            raise AttributeError(f"{name} was defined in the script that saved it ({path}); load it from a script"
                                 f" that defines {name} too")
        found = getattr(found, part)
    return found


def to_json(value: Any) -> Any:
    """``value`` as plain JSON (the forms in this module's docstring), or :class:`_UnsaveableError`."""
    import numpy as np

    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        if len(value) == 2 and isinstance(value, tuple) and value[0] == "keras":  # task.to_portable's form
            config = json.loads(json.dumps(value[1], default=_plain))
            return {"$keras": True, "config": config}
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise _UnsaveableError(f"a dict whose keys are not all strings ({sorted(map(repr, value))[:3]})")
        return {"$dict": {k: to_json(v) for k, v in value.items()}}
    if isinstance(value, type) or callable(value) and hasattr(value, "__qualname__"):
        return {"$import": _import_path(value)}
    raise _UnsaveableError(f"a {type(value).__module__}.{type(value).__name__} object, which has no JSON form")


def _plain(value: Any) -> Any:
    """json.dumps' fallback inside a Keras config: NumPy scalars and arrays as numbers and lists."""
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"a {type(value).__name__} in a Keras config")


def from_json(value: Any) -> Any:
    """The value :func:`to_json` wrote (a Keras config as :func:`hvdkeras.spark.keras.task.from_portable` reads it)."""
    if isinstance(value, list):
        return [from_json(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "$dict" in value:
        return {k: from_json(v) for k, v in value["$dict"].items()}
    if "$keras" in value:
        return ("keras", value["config"])
    if "$import" in value:
        return _resolve(str(value["$import"]))
    raise ValueError(f"an object of unknown form {sorted(value)}")


class ParamsWriter(MLWriter):
    """Writes ``<path>/metadata`` and ``<path>/model.keras`` for a :class:`KerasModel` or a :class:`KerasEstimator`.

    Args:
        instance: the estimator or model.
        skip: parameters not saved (the model goes to its own file).
    """

    def __init__(self, instance: Any, skip: Sequence[str] = ("model",)):
        super().__init__()
        self.instance = instance
        self.skip = tuple(skip)

    def _handleOverwrite(self, path: str) -> None:
        """Removes the saved model at ``path`` through fsspec (Spark's own way needs Hadoop's connector for an object
        store); a ``path`` that holds something other than a saved model is refused, not removed."""
        store = Store.create(path)
        where = store.get_localized_path(path)
        if not store.fs.exists(where):
            return
        if not store.exists(path + "/metadata"):
            raise SetupError(f"{path} exists and holds no saved model (no {path}/metadata): overwrite removes only a"
                             " saved model; save to another path")
        store.fs.rm(where, recursive=True)

    def saveImpl(self, path: str) -> None:
        """Writes the parameters as JSON and the Keras file under ``path``.

        Raises:
            SetupError: ``path`` holds a saved model (without overwrite), or a parameter has no JSON form.
        """
        import pyspark

        from hvdkeras.spark.keras.serialization import model_to_bytes
        from hvdkeras.spark.keras.task import to_portable

        store = Store.create(path)
        if store.exists(path + "/metadata") and not self.shouldOverwrite:
            raise SetupError(f"{path} already holds a saved model; use model.write().overwrite().save(path)")
        instance = self.instance
        params = {p.name: instance.getOrDefault(p.name) for p in instance.params  # the defaults come with the class
                  if instance.isSet(p) and p.name not in self.skip}
        params.update({name: to_portable(params[name], kind) for name, kind in PORTABLE.items() if name in params})
        saved: Dict[str, Any] = {}
        for name, value in params.items():
            try:
                saved[name] = to_json(value)
            except _UnsaveableError as exc:
                raise SetupError(f"cannot save parameter {name!r} of {type(instance).__name__}: {exc}; save without it"
                                 f" (set it to None) and set it again after loading") from None
        metadata = {
            "class": f"{type(instance).__module__}.{type(instance).__name__}", "format": FORMAT,
            "timestamp": int(time.time() * 1000), "sparkVersion": pyspark.__version__, "uid": instance.uid,
            "paramMap": saved, "defaultParamMap": {},
        }
        fs, where = store.fs, store.get_localized_path(path)
        fs.makedirs(where, exist_ok=True)
        if instance.getOrDefault("model") is not None:  # an estimator may be saved before it is given one
            with fs.open(f"{where}/{MODEL_FILE}.tmp", "wb") as f:
                f.write(model_to_bytes(instance.getOrDefault("model")))
            fs.mv(f"{where}/{MODEL_FILE}.tmp", f"{where}/{MODEL_FILE}")
        store.write_text(path + "/metadata", json.dumps(metadata))


class ParamsReader(MLReader):
    """Reads what :class:`ParamsWriter` wrote, as ``cls`` (:class:`KerasModel` or :class:`KerasEstimator`).

    Args:
        cls: the class to load.
        safe_mode: refuse what runs code when loaded (pickles of the earlier format, Keras' unsafe layers such as a
            ``Lambda``'s bytecode); False only for a folder whose origin you trust.
    """

    def __init__(self, cls: Any, safe_mode: bool = True):
        super().__init__()
        self.cls = cls
        self.safe_mode = safe_mode

    def load(self, path: str) -> Any:
        """The :class:`KerasModel` or :class:`KerasEstimator` saved at ``path``.

        Raises:
            SetupError: ``path`` holds no saved model of this class, or (in safe mode) something that runs code.
        """
        from hvdkeras.spark.keras.serialization import model_from_bytes
        from hvdkeras.spark.keras.task import from_portable

        name = self.cls.__name__
        store = Store.create(path)
        if not store.exists(path + "/metadata"):
            raise SetupError(f"{path} holds no saved {name} (no {path}/metadata)")
        try:
            metadata = json.loads(store.read(path + "/metadata").decode())
        except ValueError:
            raise SetupError(f"{path}/metadata is not JSON: not a saved {name}") from None
        if not isinstance(metadata, dict) or not isinstance(metadata.get("paramMap"), dict):
            raise SetupError(f"{path}/metadata has no paramMap: not a saved {name}")
        saved = str(metadata.get("class", "")).rsplit(".", 1)[-1]
        if saved != name:
            raise SetupError(f"{path} holds a saved {saved or 'object'}, not a {name}: load it with {saved}.load")
        if metadata.get("format") == FORMAT:
            params = self._from_json(path, metadata["paramMap"])
        else:
            params = self._from_pickles(path, metadata["paramMap"])
        custom_objects = params.get("custom_objects")
        params.update({name: from_portable(params[name], kind, custom_objects) for name, kind in PORTABLE.items()
                       if name in params})
        if store.exists(f"{path}/{MODEL_FILE}"):
            params["model"] = model_from_bytes(store.read(f"{path}/{MODEL_FILE}"), custom_objects,
                                               safe_mode=self.safe_mode)
        loaded = self.cls(**params)
        loaded._resetUid(metadata["uid"])
        return loaded

    @staticmethod
    def _from_json(path: str, param_map: Dict[str, Any]) -> Dict[str, Any]:
        params = {}
        for name, value in param_map.items():
            try:
                params[name] = from_json(value)
            except (ImportError, AttributeError, ValueError) as exc:
                raise SetupError(f"{path}/metadata: parameter {name!r} cannot be loaded here ({exc})") from None
            except SetupError as exc:
                raise SetupError(f"{path}/metadata: parameter {name!r}: {exc}") from None
        return params

    def _from_pickles(self, path: str, param_map: Dict[str, Any]) -> Dict[str, Any]:
        """The earlier format's parameters, each a base64 pickle: refused in safe mode."""
        import base64

        import cloudpickle

        if self.safe_mode:
            field = next(iter(param_map), "paramMap")
            raise SetupError(f"{path}/metadata holds pickles (field paramMap.{field}; a model saved by an earlier"
                             " hvdkeras or by Horovod), which run code when loaded: load it with"
                             " KerasModel.load(path, safe_mode=False) only if you trust where it came from, then"
                             " save it again to get the JSON form")
        return {name: cloudpickle.loads(base64.b64decode(text)) for name, text in param_map.items()}
