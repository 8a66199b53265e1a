"""One rank's Ray actor: it says where it runs and what it has, takes its Horovod settings, and runs what the driver
sends it in its own process (Horovod's ``BaseHorovodWorker``).

:class:`RankWorker` is a plain class; :mod:`hvdkeras.ray.executor` makes it an actor (``ray.remote``) with the
resources of one worker. Ray sends the class by reference, so a node must have hvdkeras installed to start it; the
executor turns a node that cannot into one line.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Sequence


def identity() -> Dict[str, Any]:
    """Where this Ray worker runs and what its Python has: ``node_id``, ``ip`` (the node's address as Ray knows
    it), ``hostname``, ``gpus`` (``ray.get_gpu_ids()``), ``unpatched`` (why its Horovod would serve an open
    rendezvous, or None), ``pid`` and :func:`~hvdkeras.engines.python_check.python_probe`'s keys."""
    import socket

    import ray

    from hvdkeras.engines.python_check import python_probe
    from hvdkeras.runtime.rendezvous import horovod_unpatched

    found: Dict[str, Any] = dict(next(python_probe()(None)))
    found.update(node_id=ray.get_runtime_context().get_node_id(), ip=ray.util.get_node_ip_address(),
                 hostname=socket.gethostname(), gpus=[str(g) for g in ray.get_gpu_ids()],
                 unpatched=horovod_unpatched(), pid=os.getpid())
    return found


def set_environment(env: Dict[str, str]) -> None:
    """Sets a rank's environment in this process; an empty value removes a variable."""
    for key, value in env.items():
        if value == "":
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def interface(address: str, nics: Optional[Sequence[str]]) -> Optional[str]:
    """The network interface of this node that holds ``address`` (among ``nics`` when given)."""
    from hvdkeras.engines.placement import interface_of

    return interface_of(address, nics)


class RankWorker:
    """A rank's actor: its identity, its environment, the object Horovod's ``execute`` hands functions."""

    executable: Any = None

    def identity(self) -> Dict[str, Any]:
        """:func:`identity`, in this actor."""
        return identity()

    def interface(self, address: str, nics: Optional[Sequence[str]]) -> Optional[str]:
        """:func:`interface`, in this actor."""
        return interface(address, nics)

    def setup(self, env: Dict[str, str]) -> None:
        """Sets this rank's environment (:func:`set_environment`) before it runs anything."""
        set_environment(env)

    def env_vars(self) -> Dict[str, str]:
        """This actor's environment (Horovod's ``BaseHorovodWorker.env_vars``)."""
        return dict(os.environ)

    def get_gpu_ids(self) -> List[str]:
        """The GPUs Ray assigned this actor."""
        import ray

        return [str(g) for g in ray.get_gpu_ids()]

    def set_queue(self, queue: Any) -> None:
        """Sends this rank's ``ray_logger.log`` values to the driver's callbacks through ``queue``
        (:mod:`hvdkeras.ray.ray_logger`)."""
        from hvdkeras.ray import ray_logger

        ray_logger.configure(queue)

    def start_executable(self, executable_cls: Optional[type] = None, executable_args: Optional[list] = None,
                         executable_kwargs: Optional[dict] = None) -> None:
        """Makes the object that :meth:`execute` hands its functions (None without a class)."""
        if executable_cls is not None:
            self.executable = executable_cls(*(executable_args or []), **(executable_kwargs or {}))

    def execute(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(executable)`` in this actor."""
        return fn(self.executable)

    def run(self, fn: Callable[..., Any], args: Sequence[Any], kwargs: Dict[str, Any]) -> Any:
        """``fn(*args, **kwargs)`` in this actor."""
        return fn(*args, **kwargs)
