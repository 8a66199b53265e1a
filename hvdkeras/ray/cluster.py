"""The Ray cluster a job runs on: Ray imported, the cluster joined within a timeout, and the ranks' resources
found there before anything waits for them.

Ray waits without end for what a cluster does not have: a placement group of more CPUs or GPUs than its nodes hold
stays pending, and an address that does not answer keeps the driver retrying. Each of these is one line here
(:class:`~hvdkeras.common.errors.SetupError`) instead: Ray not installed, an address that does not answer within
``timeout_s``, more workers than the cluster can ever hold, a placement group not ready within its timeout.
"""
from __future__ import annotations

import os
import socket
import time
from typing import Any, Optional

from hvdkeras.common.errors import SetupError
from hvdkeras.launch.ray import Request, shortfall

INSTALL = "pip install 'hvdkeras[ray]' (Ray 2.43 or newer) on the driver and every node"
ADDRESS_ENV = "RAY_ADDRESS"
AUTH_REFUSED = ("InvalidAuthToken", "AuthenticationError")  # Ray's words for a token missing or wrong (Ray 2.52+)
FIX_TOKEN = ("give this driver the cluster's token as its nodes have it: RAY_AUTH_MODE=token, and the token in"
             " ~/.ray/auth_token, RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN (docs/ray.md#security)")


def import_ray() -> Any:
    """Ray's module, or one line saying how to install it.

    Raises:
        SetupError: Ray is not installed.
    """
    try:
        import ray
    except ImportError as exc:
        raise SetupError(f"hvdkeras.ray needs Ray, which this Python lacks ({exc}): {INSTALL}") from None
    return ray


def _answers(address: str, timeout_s: float) -> Optional[str]:
    """Why ``host:port`` does not take a TCP connection within ``timeout_s``; None when it does."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return f"it is not host:port (Received: address={address!r})"
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return None
    except socket.timeout:
        return f"no answer within {timeout_s:g} s"
    except OSError as exc:
        return (exc.strerror or type(exc).__name__).lower()


def connect(address: Optional[str] = None, timeout_s: float = 30.0) -> Any:
    """Joins the Ray cluster at ``address`` (``host:port`` of its head, ``"auto"`` for the one this node belongs to,
    None for ``RAY_ADDRESS`` or a cluster started here), unless this process has joined one already.

    Returns:
        Ray's module, connected.

    Raises:
        SetupError: Ray is missing, or the address does not answer within ``timeout_s``, or Ray refuses to join.
    """
    ray = import_ray()
    if ray.is_initialized():
        return ray
    wanted = address or os.environ.get(ADDRESS_ENV)
    if wanted and wanted != "auto" and not wanted.startswith(("ray://", "local")):
        why = _answers(wanted, timeout_s)
        if why:
            raise SetupError(f"the Ray cluster at {wanted} does not answer ({why}): start it with `ray start --head`"
                             " on its head node, or pass the head's address as host:port (--address)")
    try:
        ray.init(address=wanted or "auto", log_to_driver=True, logging_level="WARNING")
    except (ConnectionError, RuntimeError, ValueError) as exc:
        if refused_token(exc):
            raise SetupError(f"the Ray cluster at {wanted or 'auto'} refused this driver's token (Ray's token"
                             f" authentication is on there, and this driver has no token or another): {FIX_TOKEN}"
                             ) from None
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SetupError(f"cannot join the Ray cluster at {wanted or 'auto'} ({first}): start one with `ray start"
                         " --head`, run this on one of its nodes, or pass --address host:port") from None
    return ray


def refused_token(error: BaseException) -> bool:
    """Whether Ray's ``error`` (or an error it was raised from) says the cluster refused the driver's token."""
    seen: Any = error
    for _ in range(8):  # Ray wraps its AuthenticationError in a RuntimeError, then a ConnectionError
        if seen is None:
            return False
        if type(seen).__name__ in AUTH_REFUSED or any(word in str(seen) for word in AUTH_REFUSED):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def leave(drain_s: float = 0.5) -> None:
    """Leaves the Ray cluster this process joined, after ``drain_s`` for the output Ray still forwards from the
    workers (a failed worker's traceback), so that the driver's own last line comes after it."""
    ray = import_ray()
    if ray.is_initialized():
        time.sleep(drain_s)
        ray.shutdown()


def reserve(ray: Any, wanted: Request, timeout_s: float) -> Any:
    """A placement group for ``wanted``, ready; removed again when it is not ready within ``timeout_s``.

    Raises:
        SetupError: the cluster can never hold it (:func:`shortfall`), or it was not ready in time.
    """
    from ray.util.placement_group import placement_group, remove_placement_group

    never = shortfall(wanted, ray.nodes())
    if never:
        raise SetupError(f"this Ray cluster cannot hold {wanted.describe()}: {never}; ask for fewer workers or"
                         " fewer CPUs/GPUs per worker, or add nodes (Ray would wait for them forever)")
    group = placement_group(wanted.bundles, strategy=wanted.strategy)
    if not group.wait(timeout_seconds=timeout_s):
        remove_placement_group(group)
        free = ray.available_resources()
        raise SetupError(f"Ray could not place {wanted.describe()} within placement_group_timeout_s={timeout_s:g} s"
                         f" (free now: {free.get('CPU', 0):g} CPUs, {free.get('GPU', 0):g} GPUs): other jobs hold"
                         " them; wait for them or raise placement_group_timeout_s")
    return group
