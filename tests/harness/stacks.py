"""Which stack this suite runs on, and the tests that run on one stack per ``make test``.

``make test`` runs the whole suite on both stacks. A few tests exercise machinery whose path
does not depend on the stack (the benchmark lab's namespaces and shaper, the Slurm cluster and
its generated script, ssh launching across the two namespace hosts, the Horovod build's failure
report) and take minutes each; they run on the keras2 stack only, to keep each
stack within its time. ``HVDKERAS_ONCE_TESTS=all`` runs them on keras3 too.
"""
import os

import pytest

ONCE_ENV = "HVDKERAS_ONCE_TESTS"


def keras_major() -> int:
    import keras

    return int(keras.__version__.split(".")[0])


def once_per_make_test(what: str, minutes: float):
    """A skip marker for the keras3 run of a stack-independent test that takes about ``minutes``."""
    return pytest.mark.skipif(
        keras_major() >= 3 and os.environ.get(ONCE_ENV) != "all",
        reason=f"{what}: once per `make test`, on the keras2 stack; the path does not depend on the stack and takes"
               f" about {minutes:g} minutes ({ONCE_ENV}=all runs it here too)")
