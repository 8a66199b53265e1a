"""tools/test_stacks.sh, ``make test``'s driver, with a stand-in for make that logs what it was asked and when."""
import os
import subprocess
import time

import pytest

from tests.harness.ranks import REPO

DRIVER = os.path.join(REPO, "tools", "test_stacks.sh")

# The stand-in make: logs "<start|end> <target> <stack> <time>", sleeps for a test-stack, fails where FAIL names the
# "<target>:<stack>".
FAKE_MAKE = """#!/usr/bin/env bash
target=$2 stack=${3#STACK=} order=${4:-ORDER=}
echo "start $target $stack $(date +%s.%N) ${order#ORDER=}" >> "$LOG"
[ "$target" = test-stack ] && { echo "suite of $stack ran"; sleep 1; }
echo "end $target $stack $(date +%s.%N) ${order#ORDER=}" >> "$LOG"
[ "$FAIL" = "$target:$stack" ] && { echo "$stack: a test failed"; echo "FAILED tests/t.py::test_$stack - assert 4 == 5"
  exit 2; }
exit 0
"""


def _drive(tmp_path, fail=""):
    make = tmp_path / "make"
    make.write_text(FAKE_MAKE)
    make.chmod(0o755)
    log = tmp_path / "calls.log"
    proc = subprocess.run(["bash", DRIVER, str(make), "keras2", "keras3"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env=dict(os.environ, LOG=str(log), FAIL=fail))
    calls, orders = {}, {}
    for line in log.read_text().splitlines():
        what, target, stack, at, *order = line.split()
        calls[(what, target, stack)] = float(at)
        if target == "test-stack":
            orders[stack] = order
    return proc, calls, orders


def test_every_install_comes_first_then_the_suites_run_side_by_side(tmp_path):
    proc, calls, orders = _drive(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the background suite runs its distributed tests first, beside the foreground's unit tests
    assert orders == {"keras2": [], "keras3": ["distributed-first"]}
    last_install = max(calls[("end", "install", s)] for s in ("keras2", "keras3"))
    starts = [calls[("start", "test-stack", s)] for s in ("keras2", "keras3")]
    ends = [calls[("end", "test-stack", s)] for s in ("keras2", "keras3")]
    assert min(starts) >= last_install
    assert max(starts) < min(ends)  # each suite began before the other ended: side by side
    # the background suite's output comes after the foreground's, named, from its log
    assert proc.stdout.index("suite of keras2 ran") < proc.stdout.index("suite of keras3 ran")
    assert "runs/test-keras3.log" in proc.stdout and (tmp_path / "runs" / "test-keras3.log").exists()


@pytest.mark.parametrize("stack", ["keras2", "keras3"])
def test_a_suite_that_fails_on_either_stack_fails_make_test_after_both_ran(tmp_path, stack):
    proc, calls, _ = _drive(tmp_path, fail=f"test-stack:{stack}")
    assert proc.returncode == 1
    assert ("end", "test-stack", "keras2") in calls and ("end", "test-stack", "keras3") in calls
    assert f"{stack}: a test failed" in proc.stdout
    # the end names the failed test, whichever lane it was in: the tail of a long output is what a CI page shows
    assert proc.stderr.strip().splitlines()[-2:] == [
        f"make test: [{stack}] FAILED tests/t.py::test_{stack} - assert 4 == 5",
        f"make test: the suite failed on stack(s) {stack}; each one's output is above"]


def test_an_install_that_fails_runs_no_suite(tmp_path):
    tic = time.monotonic()
    proc, calls, _ = _drive(tmp_path, fail="install:keras3")
    assert proc.returncode == 2 and "the install of stack keras3 failed" in proc.stderr
    assert not [c for c in calls if c[1] == "test-stack"]
    assert time.monotonic() - tic < 30


def test_an_unknown_order_of_a_stacks_suite_is_one_line():
    proc = subprocess.run(["make", "-n", "test-stack", "ORDER=units-last"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0
    assert "unknown ORDER=units-last; choose unit-first or distributed-first" in proc.stderr.strip().splitlines()[-1]
