"""TensorFlow's import, done once and explicitly by the command lines: :func:`load`.

Importing a hvdkeras module that needs TensorFlow (``hvdkeras.callbacks``,
``hvdkeras.keras``, the trainer) imports it the ordinary way, with whatever it
prints. The command lines (``python -m hvdkeras.train``, ``hvdkeras.input_bench``)
call :func:`load` first, before any such module, so that their output stays the
one-line kind whatever TensorFlow version is installed.

While it imports TensorFlow, :func:`load` also keeps matplotlib out: Keras 3 (which TensorFlow 2.16+
imports with itself) imports ``matplotlib.pyplot`` for its two plotting functions wherever matplotlib is
installed, a large part of each rank's start (docs/performance.md, "Figures behind defaults"). A rank
never plots; Keras' plotting functions get stand-ins that import matplotlib at their first use instead.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.util
import os
import re
import sys
import tempfile
from types import ModuleType
from typing import Any, Iterator, Optional, Sequence

from hvdkeras.common import launcher_watch
from hvdkeras.common.horovod_env import ThreadBudget

# Keras 3's modules that import matplotlib at their own import, and what each binds: (module, name, import).
KERAS_PLOTTING = (("keras.src.visualization.plot_image_gallery", "plt", "matplotlib.pyplot"),
                  ("keras.src.visualization.plot_bounding_box_gallery", "patches", "matplotlib.patches"))


class _Deferred:
    """Stands for module ``name`` and imports it at the first attribute asked of it."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"<{self._name}, imported at its first use>"


class _Refuse(importlib.abc.MetaPathFinder):
    """An import finder that refuses the packages ``names`` (and their submodules) while it is installed."""

    def __init__(self, names: Sequence[str]):
        self.names = tuple(names)

    def find_spec(self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None) -> None:
        if fullname.split(".")[0] in self.names:
            raise ImportError(f"{fullname} is imported at its first use, not while TensorFlow loads")
        return None


@contextlib.contextmanager
def _matplotlib_deferred() -> Iterator[None]:
    """Refuses matplotlib inside the block, then gives Keras' plotting modules stand-ins for what they found
    missing (nothing is done where matplotlib is already imported or not installed)."""
    if "matplotlib" in sys.modules or importlib.util.find_spec("matplotlib") is None:
        yield
        return
    finder = _Refuse(["matplotlib"])
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for module_name, attr, target in KERAS_PLOTTING:
            module = sys.modules.get(module_name)
            if module is not None and getattr(module, attr, False) is None:
                setattr(module, attr, _Deferred(target))


def load() -> ModuleType:
    """``import tensorflow``, with ``TF_CPP_MIN_LOG_LEVEL`` honoured for what it logs while loading.

    From TensorFlow 2.19, messages logged before absl's logging is initialised go to stderr
    whatever ``TF_CPP_MIN_LOG_LEVEL`` says: every import prints "WARNING: All log messages
    before absl::InitializeLog() is called are written to STDERR" and the oneDNN notice
    (``I0000 ... port.cc:153]``), so a one-line error became four. While TensorFlow loads,
    the process's stderr (file descriptor 2) goes to a file; afterwards its lines come back
    except the absl banner and absl-format lines (``I0000 ...``, ``W0000 ...``) below the
    level asked for. Once TensorFlow is imported, this returns it and does nothing else.
    """
    if "tensorflow" in sys.modules:
        return importlib.import_module("tensorflow")
    with _matplotlib_deferred():
        return _import_quietly(int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0") or 0))


def _import_quietly(level: int) -> ModuleType:
    """``import tensorflow`` with file descriptor 2 captured meanwhile and its lines below ``level`` dropped
    (:func:`load`'s docstring); at level 0, a plain import."""
    if level < 1:
        return importlib.import_module("tensorflow")
    dropped = ("I" if level >= 1 else "") + ("W" if level >= 2 else "")
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        try:  # the capture inside: a SIGTERM raised between the two would leave stderr in the capture
            os.dup2(captured.fileno(), 2)
            return importlib.import_module("tensorflow")
        finally:
            # The launcher may have gone meanwhile (its end of stderr closed): then stderr follows stdout, which
            # the launcher watch has pointed at the rank's log (hvdkeras.common.launcher_watch), and the lines
            # below go there, not to a broken pipe.
            os.dup2(1 if launcher_watch.closed([saved]) else saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode(errors="replace").splitlines(keepends=True):
                if line.startswith("WARNING: All log messages before absl::InitializeLog()"):
                    continue
                if re.match(rf"[{dropped}]\d{{4}} \d", line):
                    continue
                sys.stderr.write(line)
            sys.stderr.flush()


def set_thread_budget(budget: ThreadBudget) -> bool:
    """Gives TensorFlow's runtime ``budget``'s intra- and inter-op threads (a rank's, or a Spark task's CPUs).

    Returns:
        False, changing nothing, when the runtime had started already (its threads stay as they are).
    """
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(budget.intra_op)
        tf.config.threading.set_inter_op_parallelism_threads(budget.inter_op)
        return True
    except RuntimeError:
        return False
