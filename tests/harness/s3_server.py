"""moto's S3 API server (the one s3fs's own tests use) for a test's store in a bucket, stopped whatever happens."""
import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Iterator

from hvdkeras.common.processes import kill_tree


class ServerStartError(RuntimeError):
    """moto's S3 server did not answer in time."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def moto_server(host: str = "127.0.0.1", timeout_s: float = 30) -> Iterator[str]:
    """moto's S3 server on a free port of ``host`` (its endpoint URL), stopped whatever happens.

    Args:
        host: the address it listens on: loopback, or the lab's launcher address for executors on the lab's hosts.
        timeout_s: how long it may take to answer.
    """
    port = free_port(host)
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://{host}:{port}"
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
