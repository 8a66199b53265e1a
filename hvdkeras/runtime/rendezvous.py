"""The authenticated rendezvous: whether the Horovod this process runs requires the job's secret (build patch 0010).

Every path that starts or joins a Gloo rendezvous asks here first, and fails closed: a rank of
``python -m hvdkeras.train`` under a Gloo launcher (:func:`hvdkeras.runtime.distributed.init`),
``hvdkeras.spark.run`` on the driver and on each executor (:mod:`hvdkeras.spark.gang`). A Horovod without
the patch (the package index's, or a build that skipped it) or a launcher that set no secret is refused in
one line saying how to build the patched one, unless :data:`OPEN_RENDEZVOUS_ENV` accepts an open
rendezvous. Imports Horovod's runner only (pure Python), never TensorFlow.
"""
from __future__ import annotations

import os
from typing import MutableMapping, Optional

from hvdkeras.common.errors import SetupError

SECRET_ENV = "HOROVOD_GLOO_RENDEZVOUS_SECRET"  # build patch 0010's: the job's secret, on every rendezvous request
OPEN_RENDEZVOUS_ENV = "HVDKERAS_ALLOW_OPEN_RENDEZVOUS"  # "1": accept a rendezvous that answers anyone
_HOW = ("build the patched one with python -m hvdkeras.build_horovod (make install does), or set"
        f" {OPEN_RENDEZVOUS_ENV}=1 to accept that on a network you trust")


def horovod_unpatched() -> Optional[str]:
    """Why the Horovod this process imports serves an open Gloo rendezvous (None: it has build patch 0010, which
    makes every rendezvous started with a secret require it; or Horovod is not installed). Imports Horovod's
    runner only (pure Python, no TensorFlow)."""
    try:
        from horovod.runner.http import http_server
    except ImportError:
        return None
    if hasattr(http_server, "SECRET_ENV") and hasattr(http_server, "rendezvous_secret"):
        return None
    where = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(http_server.__file__))))
    return (f"the Horovod this process imports ({where}) lacks hvdkeras's build patch 0010 (a Horovod from the"
            " package index, or one built without it): its rendezvous answers anyone who reaches its port")


def open_rendezvous(environ: Optional[MutableMapping[str, str]] = None) -> Optional[str]:
    """Why this Gloo rank's rendezvous answers anyone (None: it requires the job's secret, this is not a Gloo rank,
    or :data:`OPEN_RENDEZVOUS_ENV` accepts it)."""
    env = os.environ if environ is None else environ
    if env.get(OPEN_RENDEZVOUS_ENV) == "1" or not env.get("HOROVOD_GLOO_RENDEZVOUS_ADDR"):
        return None
    unpatched = horovod_unpatched()
    if unpatched is not None:
        return unpatched
    if not env.get(SECRET_ENV):
        return ("its launcher started the Gloo rendezvous without the job's secret (a horovodrun without hvdkeras's"
                " build patch 0010): the rendezvous answers anyone who reaches its port")
    return None


def require_authenticated_rendezvous(where: str, environ: Optional[MutableMapping[str, str]] = None,
                                     launcher: bool = False) -> None:
    """Raises :class:`SetupError` in one line when ``where``'s rendezvous would answer anyone: on a Gloo rank
    (:func:`open_rendezvous`), or, with ``launcher``, in a process that starts one (:func:`horovod_unpatched`)."""
    env = os.environ if environ is None else environ
    if env.get(OPEN_RENDEZVOUS_ENV) == "1":
        return
    why = horovod_unpatched() if launcher else open_rendezvous(env)
    if why is not None:
        raise SetupError(f"{where}: {why}; {_HOW}")
