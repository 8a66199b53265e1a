"""A user's own piece named in a config as ``"package.module:function"``, imported only when it is built.

The contract (docs/config.md#your-own-model-data-loss-and-metrics):

* ``model.name``, ``data.name``, ``trainer.loss`` and each of ``trainer.metrics`` may be
  an import path ``package.module:attribute`` instead of a built-in name;
* the module is found on ``PYTHONPATH`` (``sys.path``) or in the folder of the config
  file that named it, which is appended to ``sys.path`` (after everything already
  there) the first time a piece is imported from it;
* each failure is one :class:`~hvdkeras.common.errors.ConfigError` naming the key, where its
  value came from and what was wrong: not ``package.module:attribute``, module not found,
  the module failed to import, no such attribute, not callable.

Nothing here imports TensorFlow: :func:`is_import_path` is what the dry run asks, and it
never imports the user's module.
"""
from __future__ import annotations

import importlib
import os
import re
import sys
from typing import Any, Callable, Optional

from hvdkeras.common.errors import ConfigError
from hvdkeras.config import is_import_path

__all__ = ["is_import_path", "resolve"]

_PATH = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")


def _error(key: str, source: Optional[str], spec: str, what: str) -> ConfigError:
    return ConfigError.for_key(key, f"name a callable as package.module:function ({what})", spec, source)


def resolve(spec: str, key: str, source: Optional[str] = None, folder: Optional[str] = None) -> Callable[..., Any]:
    """The callable ``spec`` (``package.module:function``) names, for config key ``key`` set in ``source``.

    ``folder``: the config file's folder, searched after ``PYTHONPATH``. Raises a one-line
    :class:`ConfigError` for each way it can fail (see the module docstring).
    """
    if not _PATH.match(spec):
        raise _error(key, source, spec, "a module path, a colon, then the function's name")
    module_name, _, attribute = spec.partition(":")
    if folder and os.path.isdir(folder) and os.path.abspath(folder) not in map(os.path.abspath, sys.path):
        sys.path.append(os.path.abspath(folder))
    searched = "PYTHONPATH" + (f" or in {os.path.abspath(folder)}" if folder else "")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise _error(key, source, spec, f"module {module_name} was not found on {searched}") from None
        raise _error(key, source, spec, f"importing {module_name} failed: {type(exc).__name__}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 -- any error in the user's module is reported in one line
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise _error(key, source, spec, f"importing {module_name} failed: {type(exc).__name__}: {first}") from None
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise _error(key, source, spec, f"module {module_name} has no {attribute}")
        target = getattr(target, part)
    if not callable(target):
        kind = type(target).__name__
        raise _error(key, source, spec, f"{attribute} is {'an' if kind[0] in 'aeiou' else 'a'} {kind}, not callable")
    function: Callable[..., Any] = target
    return function
