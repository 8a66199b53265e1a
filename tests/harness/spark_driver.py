"""The one local[2] Spark driver a stack's Spark tests share (``tests/distributed/scripts/spark_local_check.py``).

test_spark.py, test_spark_tuning.py and test_horovod_spark_keras.py each assert on a part of its result; the
``spark_local`` fixture (tests/distributed/conftest.py) runs it once per session with the parts of the modules this
session runs here.
"""
import os
import sys
from typing import Dict, List, Sequence

from tests.harness.ranks import SCRIPTS, launch, results

CHECK = os.path.join(SCRIPTS, "spark_local_check.py")


def run(work: str, estimator: bool, scenarios: List[str], examples: Sequence[str] = (), tuning: bool = False,
        stream: bool = False, quick_start: bool = False, timeout: float = 1500) -> Dict[str, dict]:
    """The driver's result for the parts asked for (``{}`` when none is).

    ``timeout`` only catches a hang: the driver took about 6 minutes beside the other stack's suite on a quiet day,
    and was killed at 15 minutes beside the other stack's Spark cluster and a busy core, making progress.

    It runs as in an activated venv: this venv's ``bin`` first on ``PATH`` and no ``PYSPARK_PYTHON``, so local[2]'s
    executors start the venv's ``python3``, as a user's script gets them without setting anything."""
    if not (estimator or tuning or scenarios or examples or stream or quick_start):
        return {}
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    env.update(PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}",
               VIRTUAL_ENV=sys.prefix)
    cmd = [sys.executable, CHECK, work] + (["--estimator"] if estimator else []) + (["--tuning"] if tuning else []) + \
        (["--quick-start"] if quick_start else []) + \
        (["--stream"] if stream else []) + \
        (["--scenarios", ",".join(scenarios)] if scenarios else []) + \
        (["--examples", ",".join(examples)] if examples else [])
    (result,) = results(launch(cmd, env=env, timeout=timeout, cwd=work))
    return result
