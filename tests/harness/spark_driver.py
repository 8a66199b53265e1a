"""The one local[2] Spark driver a stack's Spark tests share (``tests/distributed/scripts/spark_local_check.py``).

test_spark.py, test_spark_s3.py and test_horovod_spark_keras.py each assert on a part of its result; the
``spark_local`` fixture (tests/distributed/conftest.py) runs it once per session with the parts of the modules
this session runs here, and :func:`moto_server` is the S3 server the S3 part needs, up only while the driver runs.
"""
import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Dict, Iterator, List, Optional, Sequence

from hvdkeras.common.processes import kill_tree
from tests.harness.ranks import SCRIPTS, launch, results

CHECK = os.path.join(SCRIPTS, "spark_local_check.py")


class ServerStartError(RuntimeError):
    """moto's S3 server did not answer in time."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def moto_server(timeout_s: float = 30) -> Iterator[str]:
    """moto's S3 server on a free port of 127.0.0.1 (its endpoint URL), stopped whatever happens."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise ServerStartError(f"moto's S3 server did not start on {endpoint}"
                                            f" (exit status {server.poll()})") from None
                time.sleep(0.2)
        yield endpoint
    finally:
        kill_tree(server.pid)
        server.wait(timeout=30)


def run(work: str, estimator: bool, s3: bool, scenarios: List[str], examples: Sequence[str] = (),
        timeout: float = 900) -> Dict[str, dict]:
    """The driver's result for the parts asked for (``{}`` when none is).

    It runs as in an activated venv: this venv's ``bin`` first on ``PATH`` and no ``PYSPARK_PYTHON``, so local[2]'s
    executors start the venv's ``python3``, as a user's script gets them without setting anything."""
    if not (estimator or s3 or scenarios or examples):
        return {}
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    env.update(PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}",
               VIRTUAL_ENV=sys.prefix)
    with contextlib.ExitStack() as stack:
        endpoint: Optional[str] = stack.enter_context(moto_server()) if s3 else None
        cmd = [sys.executable, CHECK, work] + (["--estimator"] if estimator else []) + \
            (["--s3", endpoint] if endpoint else []) + (["--scenarios", ",".join(scenarios)] if scenarios else []) + \
            (["--examples", ",".join(examples)] if examples else [])
        (result,) = results(launch(cmd, env=env, timeout=timeout, cwd=work))
    return result
