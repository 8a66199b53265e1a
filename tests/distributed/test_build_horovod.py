"""The Horovod this suite runs on, proven the way the install proves it; and a broken build caught.

The smoke check runs on two real Gloo ranks through the shared harness. The broken
build adds a patch that includes a header that does not exist (HVDKERAS_HOROVOD_EXTRA_PATCHES,
into a throwaway cache) and must fail with one line naming the TensorFlow version and the
compiler's error, before anything is installed.
"""
import importlib.metadata
import os
import re
import subprocess
import sys

import pytest

from hvdkeras.build_horovod import build_plan as plans
from tests.harness.ranks import REPO, horovodrun
from tests.harness.stacks import once_per_make_test

DATA = os.path.join(os.path.dirname(__file__), "data")
OPS = ("allreduce", "allreduce_average", "allreduce_int32", "allreduce_sparse", "grouped_allreduce",
       "grouped_allreduce_tf_function", "broadcast")


@pytest.fixture(scope="module")
def installed():
    """``(the smoke check's job, the install command's CompletedProcess)``: the install command (one process, and
    ``horovodrun --check-build``) runs beside the smoke check's two ranks, on the core they leave free; neither
    writes anything the other reads."""
    command = subprocess.Popen([sys.executable, "-m", "hvdkeras.build_horovod", "--no-smoke"], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    try:
        job = horovodrun(["-m", "hvdkeras.build_horovod.smoke_check"], timeout=240)
        out, err = command.communicate(timeout=600)
    finally:
        if command.poll() is None:
            command.kill()
            command.communicate()
    return job, subprocess.CompletedProcess(command.args, command.returncode, out, err)


def test_installed_horovod_passes_the_smoke_check_on_two_ranks(installed):
    job, _ = installed
    for rank in (0, 1):
        assert [ln for ln in job.lines_of(rank) if ln.startswith("SMOKE")] == [f"SMOKE ok {op}" for op in OPS]


def test_install_command_checks_an_installed_build_without_rebuilding(installed):
    _, out = installed
    assert out.returncode == 0, out.stdout + out.stderr
    assert "reusing the cached wheel" in out.stdout and "is already installed" in out.stdout
    assert "passed its checks" in out.stdout


# the build tool's failure path does not depend on the stack
@once_per_make_test("the broken build", 0.3, stack="keras3")
def test_a_build_that_does_not_compile_fails_with_one_line(tmp_path):
    """As when a patch this TensorFlow needs is missing (0002 on TensorFlow 2.19+ fails in the last of
    Horovod's 108 objects, minutes in): here an added patch breaks the first ones, Gloo's, seconds in
    (15 s against 34 s when it broke Horovod's common.h, compiled after the whole of Gloo)."""
    _, version = plans.installed_tensorflow()
    env = dict(os.environ, HVDKERAS_HOROVOD_EXTRA_PATCHES=os.path.join(DATA, "0000-test-missing-header.patch"),
               TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run([sys.executable, "-m", "hvdkeras.build_horovod", "--mpi", "no", "--no-install",
                          "--cache-dir", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=900, env=env)
    assert out.returncode == 2
    errors = out.stderr.strip().splitlines()
    assert len(errors) == 1, out.stderr
    assert re.fullmatch(rf"hvdkeras: error: Horovod 0\.28\.1 did not build against TensorFlow {version}: "
                        r"third_party/gloo/gloo/algorithm\.h:\d+:\d+: fatal error: "
                        r"hvdkeras_test_missing_header\.h: No such file or directory "
                        r"\(full log: .*\.failed/build\.log\)", errors[0]), errors[0]
    assert not list(tmp_path.glob("horovod-*-cpu-*[0-9a-f]/*.whl"))  # nothing cached as if it were good
    assert importlib.metadata.version("horovod") == "0.28.1"  # the installed one untouched
