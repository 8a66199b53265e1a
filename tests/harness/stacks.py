"""Which stack this suite runs on, and the tests that run on one stack per ``make test``.

``make test`` runs the whole suite on both stacks. A few tests exercise machinery whose path
does not depend on the stack (the benchmark lab's namespaces and shaper, the Slurm cluster and
its generated script, ssh launching across the two namespace hosts, the Horovod build's failure
report, the MPI launchers, Horovod's stall inspector, the bench's runner and report) and take a
minute or more each; each runs on one stack only, to keep each stack within its time
(docs/testing.md has the table). ``HVDKERAS_ONCE_TESTS=all`` runs them on both.
"""
import importlib.metadata
import os

import pytest

ONCE_ENV = "HVDKERAS_ONCE_TESTS"


def keras_major() -> int:
    """Keras's major version, from its installed metadata: importing Keras at collection costs seconds."""
    return int(importlib.metadata.version("keras").split(".")[0])


def current_stack() -> str:
    """``keras2`` or ``keras3``: the stack this interpreter's venv holds."""
    return "keras3" if keras_major() >= 3 else "keras2"


def once_here(stack: str) -> bool:
    """Whether a once-per-make-test test of ``stack`` runs here: on that stack, or everywhere with
    ``HVDKERAS_ONCE_TESTS=all`` (for a shared job that includes its part only where it runs)."""
    return current_stack() == stack or os.environ.get(ONCE_ENV) == "all"


def once_per_make_test(what: str, minutes: float, stack: str = "keras2"):
    """A skip marker for a stack-independent test that takes about ``minutes``: it runs on ``stack``
    only (the once-per-make-test tests are split between the stacks to even out their times)."""
    return pytest.mark.skipif(
        not once_here(stack),
        reason=f"{what}: once per `make test`, on the {stack} stack; the path does not depend on the stack and takes"
               f" about {minutes:g} minutes ({ONCE_ENV}=all runs it here too)")
