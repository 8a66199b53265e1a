"""Proves an installed Horovod before the install says done.

1. ``horovodrun --check-build`` lists TensorFlow, Gloo, and MPI or NCCL when the build asked for them.
2. :mod:`.smoke_check` on two Gloo ranks: allreduce (sum, average, int32, IndexedSlices),
   grouped_allreduce (eager and in ``tf.function``) and broadcast against exact values.

Each failure is a BuildError naming the TensorFlow version and what failed.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Sequence

from hvdkeras.build_horovod import BuildError
from hvdkeras.build_horovod.build_plan import HOROVOD_VERSION, BuildPlan
from hvdkeras.common.processes import kill_tree

SMOKE_TIMEOUT_S = 240


def horovodrun() -> str:
    """The ``horovodrun`` beside this interpreter."""
    return os.path.join(os.path.dirname(sys.executable), "horovodrun")


def _env() -> dict[str, str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def required_frameworks(plan: BuildPlan) -> list[str]:
    """The frameworks ``horovodrun --check-build`` must mark for the plan: TensorFlow, Gloo, MPI, NCCL."""
    return ["TensorFlow", "Gloo"] + (["MPI"] if plan.mpi else []) + (["NCCL"] if plan.gpu else [])


def missing_from_check_build(output: str, required: Sequence[str]) -> list[str]:
    """The names in ``required`` that ``horovodrun --check-build``'s output does not mark ``[X]``."""
    return [name for name in required if not re.search(rf"\[X\]\s+{re.escape(name)}\b", output)]


def check_build(plan: BuildPlan) -> str:
    """Runs ``horovodrun --check-build`` and returns its output.

            Raises:
                BuildError: It failed, or does not mark every framework the plan built.
    """
    proc = subprocess.run([horovodrun(), "--check-build"], capture_output=True, text=True, env=_env())
    missing = missing_from_check_build(proc.stdout, required_frameworks(plan))
    if proc.returncode != 0 or missing:
        why = f"does not list {', '.join(missing)}" if missing else f"exited {proc.returncode}"
        raise BuildError(f"Horovod {HOROVOD_VERSION} on TensorFlow {plan.tf_version}: horovodrun --check-build {why}; "
                         f"rebuild with python -m hvdkeras.build_horovod --rebuild")
    return proc.stdout


def smoke_failure(output: str, returncode: int) -> str | None:
    """What went wrong in a two-rank smoke run (None when both ranks passed every op)."""
    failed = re.findall(r"SMOKE FAILED (.*)", output)
    if failed:
        return str(failed[0]).strip()
    if returncode != 0 or not re.search(r"SMOKE ok broadcast", output):
        lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
        errors = [ln for ln in lines if re.search(r"Error|error:|Traceback", ln) and "Traceback" not in ln]
        return f"the ranks exited {returncode} before finishing: {(errors or lines or ['no output'])[-1][:300]}"
    return None


def smoke(plan: BuildPlan, np: int = 2, timeout: int = SMOKE_TIMEOUT_S) -> str:
    """Runs :mod:`.smoke_check` on ``np`` local Gloo ranks; raises BuildError naming the failing op."""
    cmd = [horovodrun(), "-np", str(np), "-H", f"localhost:{np}", "--gloo",
           sys.executable, "-m", "hvdkeras.build_horovod.smoke_check"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env())
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        proc.communicate()
        raise BuildError(f"Horovod {HOROVOD_VERSION} on TensorFlow {plan.tf_version}: the two-rank smoke check hung "
                         f"for {timeout} s and was killed") from None
    problem = smoke_failure(output, proc.returncode)
    if problem:
        raise BuildError(f"Horovod {HOROVOD_VERSION} on TensorFlow {plan.tf_version}: two-rank smoke check failed: "
                         f"{problem}")
    return output
