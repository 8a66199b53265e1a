"""Whether a process an engine started runs the driver's Python and packages: asked there, compared here.

Every engine's worker (a Spark executor's Python, a Ray worker) must run the driver's Python with Horovod,
TensorFlow and hvdkeras at the driver's versions. :func:`python_probe` gives a function that answers what it runs,
sent to that process by value (it refers to nothing of hvdkeras, so it runs where hvdkeras is missing), and
:func:`python_mismatch` says in one clause what differs. Plain Python.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, Mapping, Optional

PACKAGES = ("horovod", "tensorflow", "hvdkeras")


def python_probe() -> Callable[[Any], Iterator[Dict[str, Optional[str]]]]:
    """A function that says what Python runs it and which of a rank's packages it has; it refers to nothing of
    hvdkeras, so that it travels by value to a worker that lacks hvdkeras.

    Returns:
        ``probe(_)``, a generator of one dict: ``python`` (its executable), ``python_version`` (``3.X``) and the
        version of each of :data:`PACKAGES` (None where missing).
    """

    def probe(_: Any) -> Iterator[Dict[str, Optional[str]]]:
        import importlib.metadata as metadata
        import sys as sys_

        def version(*names: str) -> Optional[str]:
            for name in names:
                try:
                    return metadata.version(name)
                except metadata.PackageNotFoundError:
                    continue
            return None

        yield {"python": sys_.executable, "python_version": "%d.%d" % sys_.version_info[:2],
               "horovod": version("horovod"), "tensorflow": version("tensorflow", "tensorflow-cpu", "tensorflow-gpu",
                                                                    "tensorflow-intel", "tensorflow-macos"),
               "hvdkeras": version("hvdkeras")}

    return probe


def python_mismatch(driver: Mapping[str, Optional[str]], worker: Mapping[str, Optional[str]]) -> Optional[str]:
    """What a worker's Python lacks or has at another version than the driver's (its Python's, Horovod's,
    TensorFlow's, hvdkeras'), as one clause; None when they match."""
    missing = [name for name in PACKAGES if worker.get(name) is None]
    other = [f"{name} {worker.get(name)} (the driver has {driver.get(name)})" for name in PACKAGES
             if name not in missing and worker.get(name) != driver.get(name)]
    if worker.get("python_version") != driver.get("python_version"):
        other.insert(0, f"Python {worker.get('python_version')} (the driver runs {driver.get('python_version')})")
    parts = ([f"lacks {' and '.join(missing)}"] if missing else []) + ([f"has {', '.join(other)}"] if other else [])
    return "; ".join(parts) or None
