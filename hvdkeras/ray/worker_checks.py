"""What the Ray driver checks of each worker before a rank starts there, and how a failure from Ray is said in one
line: shared by :mod:`~hvdkeras.ray.executor`, :mod:`~hvdkeras.ray.elastic_executor` and
:mod:`~hvdkeras.ray.ray_train`."""
from __future__ import annotations

import os
import re
from typing import Any, Dict, Sequence

from hvdkeras.engines import failures
from hvdkeras.engines.python_check import python_mismatch, python_probe
from hvdkeras.runtime import rendezvous as rendezvous_auth

FIX_WORKERS = ("install hvdkeras, and Horovod built by `python -m hvdkeras.build_horovod`, on every Ray node at the"
               " driver's versions (docs/ray.md#every-node)")


def check_workers(found: Sequence[Dict[str, Any]]) -> None:
    """Refuses, in one line naming the node, a worker (:func:`hvdkeras.ray.worker.identity`) whose Python differs from
    the driver's or whose Horovod would serve an open rendezvous.

    Raises:
        CannotStartError: the first such worker.
    """
    driver = next(python_probe()(None))
    for f in found:
        differs = python_mismatch(driver, f)
        if differs:
            raise failures.CannotStartError(f"the Ray worker on node {f['ip']} ({f['python']}) {differs}:"
                                            f" {FIX_WORKERS}")
    if os.environ.get(rendezvous_auth.OPEN_RENDEZVOUS_ENV) != "1":
        for f in found:
            if f["unpatched"]:
                raise failures.CannotStartError(f"cannot start a rank with an authenticated rendezvous on node"
                                                f" {f['ip']}: {f['unpatched']}")


_COLOURS = re.compile(r"\x1b\[[0-9;]*m")  # Ray colours the process titles in its errors
_CAUSE = re.compile(r"^\s*((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)): \S")
_NODE = re.compile(r"\bip=([0-9A-Fa-f.:]+)")


def first_line(error: BaseException) -> str:
    """An error's first non-empty line, at most 240 characters (Ray's errors carry a traceback after it)."""
    for line in _COLOURS.sub("", str(error)).splitlines():
        if line.strip():
            return line.strip()[:240]
    return type(error).__name__


def cause_line(error: BaseException) -> str:
    """Why a Ray actor or task failed, in one line: the last ``SomeError: message`` line of the traceback Ray's error
    carries (the remote exception's own), else :func:`first_line`."""
    causes = [line.strip() for line in _COLOURS.sub("", str(error)).splitlines() if _CAUSE.match(line)]
    return causes[-1][:240] if causes else first_line(error)


def node_of(error: BaseException) -> str:
    """`` on node ADDRESS`` of the process a Ray error names (``ip=...``), or nothing."""
    found = _NODE.search(_COLOURS.sub("", str(error)))
    return f" on node {found.group(1)}" if found else ""
