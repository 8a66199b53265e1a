"""TensorFlow's import, done once and explicitly by the command lines: :func:`load`.

Importing a hvdkeras module that needs TensorFlow (``hvdkeras.callbacks``,
``hvdkeras.keras``, the trainer) imports it the ordinary way, with whatever it
prints. The command lines (``python -m hvdkeras.train``, ``hvdkeras.input_bench``)
call :func:`load` first, before any such module, so that their output stays the
one-line kind whatever TensorFlow version is installed.
"""
from __future__ import annotations

import importlib
import os
import re
import sys
import tempfile
from types import ModuleType


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
    level = int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0") or 0)
    if "tensorflow" in sys.modules or level < 1:
        return importlib.import_module("tensorflow")
    dropped = ("I" if level >= 1 else "") + ("W" if level >= 2 else "")
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        try:
            return importlib.import_module("tensorflow")
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode(errors="replace").splitlines(keepends=True):
                if line.startswith("WARNING: All log messages before absl::InitializeLog()"):
                    continue
                if re.match(rf"[{dropped}]\d{{4}} \d", line):
                    continue
                sys.stderr.write(line)
            sys.stderr.flush()
