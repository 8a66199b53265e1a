"""The gang's Gloo rendezvous: Horovod's own server on rank 0's host, answering only the job, and each rank's
Horovod settings that point at it.

The secret comes from the run's token, which every task of the gang already has: a request without it is refused
(Horovod build patch 0010; :mod:`hvdkeras.runtime.rendezvous` checks that the Horovod in use has it). The ranks
get the secret in their environment, never on a command line. Imports Horovod's runner (pure Python) only where a
server starts.
"""
from __future__ import annotations

import hashlib
import hmac
import threading
from typing import Any, Dict, Optional, Sequence, Tuple

from hvdkeras.engines.placement import Slot
from hvdkeras.runtime.rendezvous import SECRET_ENV  # Horovod patch 0010: what each request must carry


def gang_secret(token: str) -> str:
    """The secret every request to the gang's rendezvous carries, from the run's token: what reaches the
    rendezvous' port from elsewhere is refused."""
    return hmac.new(token.encode(), b"hvdkeras-gang-rendezvous", hashlib.sha256).hexdigest()


def rank_environment(slot: Slot, rendezvous: Tuple[str, int], iface: Optional[str],
                     secret: str = "") -> Dict[str, str]:
    """Horovod's settings for the rank in ``slot``, with Gloo's rendezvous at ``rendezvous`` (address, port), which
    requires ``secret`` of every request when it is given."""
    env = {
        "HOROVOD_HOSTNAME": slot.hostname, "HOROVOD_RANK": str(slot.rank), "HOROVOD_SIZE": str(slot.size),
        "HOROVOD_LOCAL_RANK": str(slot.local_rank), "HOROVOD_LOCAL_SIZE": str(slot.local_size),
        "HOROVOD_CROSS_RANK": str(slot.cross_rank), "HOROVOD_CROSS_SIZE": str(slot.cross_size),
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": rendezvous[0], "HOROVOD_GLOO_RENDEZVOUS_PORT": str(rendezvous[1]),
        "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo", "PYTHONUNBUFFERED": "1",
    }
    if iface:
        env["HOROVOD_GLOO_IFACE"] = iface
        env["NCCL_SOCKET_IFNAME"] = iface
    if secret:
        env[SECRET_ENV] = secret
    return env


def start(host: str, plan: Sequence[Slot], secret: str, verbose: int = 0) -> Any:
    """Horovod's Gloo rendezvous server on ``host`` (that address alone), initialised for ``plan``, answering only
    requests that carry ``secret``; serving on a daemon thread. Stop it with ``shutdown()`` and ``server_close()``."""
    from horovod.runner.common.util.hosts import SlotInfo
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

    server = RendezvousHTTPServer((host, 0), RendezvousHandler, verbose)
    server.secret = secret  # what Horovod patch 0010's handlers require of every request
    server.init([SlotInfo(hostname=s.hostname, rank=s.rank, local_rank=s.local_rank, cross_rank=s.cross_rank,
                          size=s.size, local_size=s.local_size, cross_size=s.cross_size) for s in plan])
    threading.Thread(target=server.serve_forever, name="hvdkeras-rendezvous", daemon=True).start()
    return server
