"""The path users without make take: the wheel into a fresh virtualenv, then Horovod, then the digits job.

hvdkeras's wheel (built from the tracked files) and the stack's TensorFlow go into a new venv with
plain pip; ``python -m hvdkeras.build_horovod`` installs Horovod (from the build cache the stack's
install filled: the same TensorFlow, flags and patches); then, from a folder outside the checkout, so
nothing of it can be imported, ``horovodrun`` trains the shipped digits config by name on two ranks.
"""
import os
import shutil
import subprocess
import sys

import pytest

from tests.harness.ranks import REPO
from tests.harness.stacks import current_stack, once_per_make_test
from tests.harness.wheel import build_wheel

# pip, the build cache and two ranks do not depend on the stack's Keras: keras3 runs it (docs/testing.md).
pytestmark = once_per_make_test("the install from the wheel into a fresh virtualenv", 2.0, stack="keras3")


def _run(cmd, timeout, **kwargs):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n" + (
        proc.stdout[-3000:] + proc.stderr[-3000:])
    return proc


def test_the_wheel_in_a_fresh_virtualenv_builds_horovod_and_trains_the_digits_job_on_two_ranks(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("lists the project's files with git")
    wheel = build_wheel(tmp_path)
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], 120)
    python, bin_dir = str(venv / "bin" / "python"), venv / "bin"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", TF_CPP_MIN_LOG_LEVEL="2")
    import importlib.metadata

    tf_version = importlib.metadata.version("tensorflow-cpu")
    # a user's two lines: hvdkeras and a TensorFlow of the range (the stack's, so the build cache serves it)
    constraints = os.path.join(REPO, "stacks", current_stack(), "constraints.txt")
    _run([python, "-m", "pip", "install", "-q", str(wheel), f"tensorflow-cpu=={tf_version}", "-c", constraints],
         900, env=env, cwd=str(tmp_path))
    built = _run([python, "-m", "hvdkeras.build_horovod"], 900, env=env, cwd=str(tmp_path))
    assert "passed its checks" in built.stdout + built.stderr

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    job = _run([str(bin_dir / "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo", python, "-m",
                "hvdkeras.train", "--config", "digits", "--workdir", "w", "--set", "trainer.epochs=1",
                "--set", "trainer.verbose=0"], 300, env=env, cwd=str(outside))
    where = _run([python, "-c", "import hvdkeras; print(hvdkeras.__file__)"], 60, env=env, cwd=str(outside))
    assert where.stdout.strip().startswith(str(venv))  # the installed copy, not the checkout
    final = [line for line in job.stdout.splitlines() if "final validation (2 ranks" in line]
    assert len(final) == 1, job.stdout[-3000:]
    assert sorted(os.listdir(outside / "w")) == ["checkpoints", "config.yaml", "export", "metrics.jsonl"]
