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


# Unit tests of the layers that import neither TensorFlow nor Keras, nor read what the stack installed (the config,
# the dry run and the report, the docs, the lab, the benchmarks' arithmetic, the harness, pure helpers): they give
# the same answer on every stack, so `make test` runs them on one, keras3, whose suite is the shorter: it sets
# HVDKERAS_STACK_FREE_ON=keras3 (Makefile, TEST_UNIT), and elsewhere they run. Checked against what each module
# imports (none imports tensorflow or keras in-process); HVDKERAS_ONCE_TESTS=all runs them on every stack.
STACK_FREE = ("tests/unit/benchmarks/", "tests/unit/config/", "tests/unit/docs/", "tests/unit/harness/",
              "tests/unit/lab/", "tests/unit/tools/", "tests/unit/test_dry_run.py", "tests/unit/test_report.py",
              "tests/unit/test_discover_hosts.py", "tests/unit/test_layers.py", "tests/unit/common/test_log.py",
              "tests/unit/common/test_schedules.py", "tests/unit/common/test_scaling.py",
              "tests/unit/common/test_workdir.py", "tests/unit/common/test_workdir_guard.py",
              "tests/unit/common/test_registry.py", "tests/unit/common/test_errors.py",
              "tests/unit/common/test_user_code.py", "tests/unit/common/test_hostnames.py",
              "tests/unit/test_hostile_launch.py", "tests/unit/test_python_versions.py")
STACK_FREE_ENV = "HVDKERAS_STACK_FREE_ON"


def _stack_free_elsewhere():
    """The stack that runs :data:`STACK_FREE` when it is not this one, else None."""
    from tests.harness.stacks import once_here

    stack = os.environ.get(STACK_FREE_ENV)
    return None if not stack or once_here(stack) else stack


def pytest_report_header(config):
    stack = _stack_free_elsewhere()
    return [f"the stack-free unit tests run on {stack} ({STACK_FREE_ENV}); not here"] if stack else []


def pytest_collection_modifyitems(config, items):
    if _stack_free_elsewhere() is None:
        return
    root = str(config.rootpath)
    kept, dropped = [], []
    for item in items:
        path = os.path.relpath(str(item.path), root)
        (dropped if path.startswith(STACK_FREE) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
