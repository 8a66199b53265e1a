"""tests/harness/lab_lock.py: one holder of the lab at a time, across processes; a stuck holder named."""
import subprocess
import sys
import time

import pytest

from tests.harness import lab_lock

HOLD = """
import sys, time
sys.path.insert(0, {repo!r})
from tests.harness import lab_lock
with lab_lock.held({path!r}):
    print("held", flush=True)
    time.sleep({seconds})
"""


def _holder(path, seconds):
    from tests.harness.ranks import REPO

    proc = subprocess.Popen([sys.executable, "-c", HOLD.format(repo=REPO, path=str(path), seconds=seconds)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_holder_waits_until_the_first_lets_go(tmp_path):
    path = tmp_path / "lab.lock"
    first = _holder(path, 1.5)
    with lab_lock.held(str(path), wait_s=30) as waited:
        assert 1.0 < waited < 30  # the first held it 1.5 s after saying so
    first.wait(timeout=10)


def test_a_holder_that_never_lets_go_is_named_after_the_wait(tmp_path):
    path = tmp_path / "lab.lock"
    stuck = _holder(path, 30)
    try:
        tic = time.monotonic()
        with pytest.raises(TimeoutError) as err:
            with lab_lock.held(str(path), wait_s=1):
                pass
        assert time.monotonic() - tic < 10
        assert str(err.value) == (f"the lab's lock {path} was held for 1s by pid {stuck.pid}; is a stuck test or lab"
                                  " still running? (python -m lab.hosts down)")
    finally:
        stuck.kill()
        stuck.wait()


def test_the_lock_is_free_again_after_the_block_and_after_an_error(tmp_path):
    path = str(tmp_path / "lab.lock")
    with pytest.raises(RuntimeError):
        with lab_lock.held(path, wait_s=1):
            raise RuntimeError("inside")
    with lab_lock.held(path, wait_s=1) as waited:
        assert waited < 0.5


def test_the_lab_modules_go_first_or_last_each_group_in_its_own_order():
    items = ["a::1", "lab1::1", "b::1", "lab1::2", "lab2::1", "c::1"]
    is_lab = lambda item: item.startswith("lab")  # noqa: E731
    lab, rest = ["lab1::1", "lab1::2", "lab2::1"], ["a::1", "b::1", "c::1"]
    assert lab_lock.place_lab_modules(items, is_lab, "first") == lab + rest
    assert lab_lock.place_lab_modules(items, is_lab, "last") == rest + lab
    assert lab_lock.place_lab_modules(items, is_lab, "in-place") == items
    with pytest.raises(ValueError, match="received: 'middle'"):
        lab_lock.place_lab_modules(items, is_lab, "middle")


def test_the_distributed_suite_collects_its_lab_modules_where_asked():
    # the hook's wiring (tests/distributed/conftest.py), once: the order itself is the test above's. The lab's
    # modules after a module without the lab on the command line, not the whole suite, whose collection imports
    # TensorFlow and Keras
    from tests.harness.ranks import REPO

    lab = ["tests/distributed/test_lab.py", "tests/distributed/test_slurm.py", "tests/distributed/test_two_hosts.py",
           "tests/distributed/test_spark_cluster.py", "tests/distributed/test_ray.py"]
    first = "tests/distributed/test_two_ranks.py"
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p",
                           "no:hypothesispytest", first, *lab, "--lab-modules", "first"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    files = [line.split("::")[0] for line in proc.stdout.splitlines() if "::" in line]
    order = list(dict.fromkeys(files))
    assert order == lab + [first], proc.stdout[-2000:] + proc.stderr[-2000:]
