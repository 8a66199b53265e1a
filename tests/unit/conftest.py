import os

import pytest


@pytest.fixture(scope="session")
def hvd_single():
    """Horovod initialised as a single process (size 1), for hooks that ask for the rank."""
    import horovod.tensorflow as hvd

    hvd.init()
    assert hvd.size() == 1
    return hvd


@pytest.fixture
def restore_environment():
    """Trainer.from_config exports HOROVOD_* settings into os.environ; keep them out of the other tests."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(autouse=True)
def _sigterm_as_before():
    """distributed.init (Trainer.from_config, assembly.start) installs the process's SIGTERM flag; put pytest's
    own handler back after each test, so a SIGTERM to pytest still ends it."""
    yield
    from hvdkeras.common import signals

    signals.uninstall_process_flag()
