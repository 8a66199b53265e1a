import pytest


@pytest.fixture(scope="session")
def hvd_single():
    """Horovod initialised as a single process (size 1), for hooks that ask for the rank."""
    import horovod.tensorflow as hvd

    hvd.init()
    assert hvd.size() == 1
    return hvd
