"""The stack a process runs: TensorFlow's, Keras' and Horovod's versions, from the installed packages' metadata.

Nothing is imported to read them (a config check, the dry run and the report stay without TensorFlow).
A workdir records the stack that trained it in its ``config.yaml``, as the comment line
``#   stack: TensorFlow 2.15.1, Keras 2.15.0, Horovod 0.28.1`` among the values resolved for the job
(:meth:`Stack.line`, :meth:`Stack.from_config_text`), and a resume on another stack is refused
(:mod:`hvdkeras.common.workdir_guard`).
"""
from __future__ import annotations

import dataclasses
import importlib.metadata
import re
from typing import Optional

# The distributions that install the `tensorflow` package (the Horovod build reads the same list).
TF_DISTRIBUTIONS = ("tensorflow-cpu", "tensorflow", "tensorflow-intel", "tensorflow-macos")
NOT_INSTALLED = "not installed"
_LINE = re.compile(r"^#\s+stack: TensorFlow (.+?), Keras (.+?), Horovod (.+?)\s*$", re.M)


@dataclasses.dataclass(frozen=True)
class Stack:
    """The versions of TensorFlow, Keras and Horovod that train (or trained) a job."""

    tensorflow: str
    keras: str
    horovod: str

    def describe(self) -> str:
        """``TensorFlow 2.15.1, Keras 2.15.0, Horovod 0.28.1``."""
        return f"TensorFlow {self.tensorflow}, Keras {self.keras}, Horovod {self.horovod}"

    @property
    def keras_major(self) -> str:
        """Keras' major version (``2`` or ``3``): what decides a checkpoint's format."""
        return self.keras.split(".")[0]

    def line(self) -> str:
        """The line ``config.yaml`` records among the values resolved for the job: ``stack: <describe()>``."""
        return f"stack: {self.describe()}"

    @classmethod
    def from_config_text(cls, text: str) -> Optional["Stack"]:
        """The stack a ``config.yaml``'s text records (its :meth:`line`, as a comment); None when it records
        none (an older version's)."""
        found = _LINE.search(text)
        return cls(*found.groups()) if found else None


def checkpoints_carry_over(trained: Stack, running: Stack) -> bool:
    """Whether ``running`` can load checkpoints ``trained`` wrote: the same Keras major version (Keras 2's
    optimizer variables do not load into Keras 3's, nor back)."""
    return trained.keras_major == running.keras_major


def _version(*names: str) -> str:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return NOT_INSTALLED


def current() -> Stack:
    """The stack installed for this interpreter."""
    return Stack(tensorflow=_version(*TF_DISTRIBUTIONS), keras=_version("keras"), horovod=_version("horovod"))
