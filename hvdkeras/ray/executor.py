"""``RayExecutor``: Horovod's ranks as Ray actors, with ``horovod.ray.RayExecutor``'s arguments and methods.

Ray's adapter on the launch core (:mod:`hvdkeras.engines`). :meth:`RayExecutor.start`:

1. joins the cluster (:func:`hvdkeras.ray.cluster.connect`) and reserves one placement group for the workers
   (:func:`hvdkeras.ray.cluster.reserve`), refused in one line when the cluster can never hold it or it is not ready
   within ``placement_group_timeout_s``;
2. starts one :class:`~hvdkeras.ray.worker.RankWorker` actor per rank and asks each where it runs and what its
   Python has: an actor that cannot start (a node without hvdkeras) or runs other versions than the driver, or a
   Horovod without the authenticated rendezvous, is one line (:class:`~hvdkeras.engines.failures.CannotStartError`);
3. places the ranks as ``horovodrun`` does, grouped by node (:func:`~hvdkeras.engines.placement.slot_plan`);
   starts Horovod's Gloo rendezvous on the driver's node address, answering only the job's secret
   (:mod:`hvdkeras.engines.rendezvous_server`), and sends each actor its settings: ranks, the rendezvous, the
   network interface of its node, the secret (in its environment, never on a command line), and its GPUs: the ones
   Ray gave it (:func:`~hvdkeras.engines.placement.visible_gpus`), none at all with ``use_gpu=False``.

:meth:`run` and :meth:`execute` wait for every rank; the first rank that fails or whose actor dies ends the others
(no rank waits in a collective for a peer that is gone) and is raised: a user error as itself, anything else as
:class:`~hvdkeras.engines.failures.RankExitedError` naming the rank and its node.
"""
from __future__ import annotations

import dataclasses
import secrets
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from hvdkeras.common import log
from hvdkeras.common.errors import HvdkerasError, PeerLostError, PeerUnresponsiveError, SetupError, StallError
from hvdkeras.engines import failures, rendezvous_server
from hvdkeras.engines.placement import Slot, slot_plan, visible_gpus
from hvdkeras.launch import ray as launch_ray
from hvdkeras.ray import cluster, ray_logger
from hvdkeras.ray.worker_checks import FIX_WORKERS, cause_line, check_workers, first_line, node_of

# Horovod 0.21's names for the placement arguments, which Horovod's own Ray example still passes.
OLD_NAMES = {"num_slots": "num_workers_per_host", "cpus_per_slot": "cpus_per_worker",
             "gpus_per_slot": "gpus_per_worker"}
_LOST_WORKER = (PeerLostError, PeerUnresponsiveError, StallError)  # a rank's own word that a peer went away
_OTHERS_FAIL_WITHIN_S = 10.0  # after a rank fails, how long the others' failures may take to say a worker died


@dataclasses.dataclass
class Settings:
    """What ``RayExecutor.create_settings`` returns (Horovod's ``MiniSettings``).

    Args:
        timeout_s: how long the ranks may take to start (their actors, and Gloo's rendezvous).
        placement_group_timeout_s: how long the workers' placement group may take to be ready.
        nics: the network interfaces the ranks may use (None: the one that holds each node's Ray address).
        ssh_identity_file: accepted for Horovod's signature; Gloo on Ray needs no ssh.
        verbose: Horovod's verbosity of its rendezvous server.
    """

    timeout_s: float = 30
    placement_group_timeout_s: float = 100
    nics: Optional[Sequence[str]] = None
    ssh_identity_file: Optional[str] = None
    verbose: int = 0
    elastic: bool = False


class RayExecutor:
    """Horovod's ranks as Ray actors (``horovod.ray.RayExecutor``): start them, run functions on every rank, stop.

    Args:
        settings: from :meth:`create_settings`.
        num_workers: how many ranks, packed onto the cluster's nodes as Ray places them; or
        num_hosts: how many nodes, each with ``num_workers_per_host`` ranks (one placement-group bundle per node,
            every bundle on its own node).
        num_workers_per_host: ranks per node, with ``num_hosts``.
        min_workers: the fewest ranks of an elastic job; max_workers: the most (see below).
        cpus_per_worker: CPUs each rank's actor takes.
        use_gpu: whether ranks use GPUs; without, no rank sees one.
        gpus_per_worker: GPUs each rank's actor takes (1 with ``use_gpu``).
        use_current_placement_group: accepted for Horovod's signature: the workers take their own placement group.
        **old_names: Horovod 0.21's ``num_slots``, ``cpus_per_slot``, ``gpus_per_slot`` (the names of
            ``num_workers_per_host``, ``cpus_per_worker``, ``gpus_per_worker``), with a warning line.

    Raises:
        SetupError: arguments that name no job (neither or both of ``num_workers`` and ``num_hosts``, a count
            below 1).

    With ``min_workers`` or ``max_workers`` (and ``reset_limit``, ``cooldown_range``, ``elastic_timeout``), the job
    is elastic, as Horovod's: :class:`~hvdkeras.ray.elastic_executor.ElasticRayExecutor` runs it (``start``,
    ``run``, ``execute``, ``shutdown``; ``run_remote`` and ``execute_single`` have no elastic meaning).
    """

    @classmethod
    def create_settings(cls, timeout_s: float = 30, ssh_identity_file: Optional[str] = None,
                        ssh_str: Optional[str] = None, placement_group_timeout_s: float = 100,
                        nics: Optional[Sequence[str]] = None) -> Settings:
        """Horovod's settings for a Ray job; ``ssh_str`` and ``ssh_identity_file`` are accepted and unused (no ssh:
        the ranks meet through Gloo's rendezvous on the driver)."""
        del ssh_str
        return Settings(timeout_s=timeout_s, placement_group_timeout_s=placement_group_timeout_s,
                        nics=tuple(nics) if nics else None, ssh_identity_file=ssh_identity_file)

    def __init__(self, settings: Optional[Settings] = None, num_workers: Optional[int] = None,
                 num_hosts: Optional[int] = None, num_workers_per_host: int = 1, cpus_per_worker: float = 1,
                 use_gpu: bool = False, gpus_per_worker: Optional[float] = None,
                 use_current_placement_group: bool = True, min_workers: Optional[int] = None,
                 max_workers: Optional[int] = None, reset_limit: Optional[int] = None,
                 cooldown_range: Optional[Tuple[int, int]] = None, elastic_timeout: float = 600,
                 override_discovery: bool = True, **old_names: Any):
        unknown = sorted(set(old_names) - set(OLD_NAMES))
        if unknown:
            raise TypeError(f"RayExecutor() got an unexpected keyword argument {unknown[0]!r}")
        given = {OLD_NAMES[k]: v for k, v in old_names.items()}
        if given:
            log.warning("RayExecutor: " + ", ".join(f"{k}= is Horovod 0.21's name for {OLD_NAMES[k]}="
                                                    for k in old_names) + "; both work")
        num_workers_per_host = given.get("num_workers_per_host", num_workers_per_host)
        cpus_per_worker = given.get("cpus_per_worker", cpus_per_worker)
        gpus_per_worker = given.get("gpus_per_worker", gpus_per_worker)
        del use_current_placement_group, override_discovery
        self.settings = settings or Settings()
        self.use_gpu = use_gpu
        self._elastic: Any = None
        if min_workers is not None or max_workers is not None:  # Horovod's elastic RayExecutor
            from hvdkeras.ray.elastic_executor import ElasticRayExecutor, ElasticSettings

            if num_workers is not None or num_hosts is not None:
                raise SetupError("an elastic job takes min_workers/max_workers, not num_workers or num_hosts"
                                 f" (Received: num_workers={num_workers}, num_hosts={num_hosts},"
                                 f" min_workers={min_workers}, max_workers={max_workers})")
            self._elastic = ElasticRayExecutor(
                ElasticSettings(min_num_proc=min_workers or 1, max_num_proc=max_workers, reset_limit=reset_limit,
                                elastic_timeout=elastic_timeout, timeout_s=self.settings.timeout_s,
                                nics=self.settings.nics, cooldown_range=cooldown_range, verbose=self.settings.verbose),
                use_gpu=use_gpu, cpus_per_worker=cpus_per_worker, gpus_per_worker=gpus_per_worker)
            num_workers = min_workers or 1
        self.request = launch_ray.request(num_workers, num_hosts, num_workers_per_host, cpus_per_worker, use_gpu,
                                       gpus_per_worker)
        self.workers: List[Any] = []
        self.plan: List[Slot] = []
        self._group: Any = None
        self._server: Any = None
        self._ray: Any = None

    @property
    def num_workers(self) -> int:
        """How many ranks the job has."""
        return self.request.num_workers

    # -- start ------------------------------------------------------------------------------------------------------

    def start(self, executable_cls: Optional[type] = None, executable_args: Optional[list] = None,
              executable_kwargs: Optional[dict] = None, extra_env_vars: Optional[Dict[str, str]] = None) -> None:
        """Starts the ranks' actors on the cluster and gives each its Horovod settings (see the module's docstring).

        Args:
            executable_cls: a class each actor makes (with ``executable_args`` and ``executable_kwargs``) and
                hands the functions of :meth:`execute`.
            extra_env_vars: set in every actor before anything runs there.

        Raises:
            SetupError: the cluster cannot hold the job or place it in time; a node cannot start a rank
                (:class:`~hvdkeras.engines.failures.CannotStartError`).
        """
        if self._elastic is not None:
            self._elastic.start(executable_cls, executable_args, executable_kwargs, extra_env_vars)
            return
        if self.workers:
            raise SetupError("this RayExecutor has started already: call shutdown() before start() again")
        ray = self._ray = cluster.connect()
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from hvdkeras.ray.worker import RankWorker

        self._group = cluster.reserve(ray, self.request, self.settings.placement_group_timeout_s)
        try:
            actor = ray.remote(RankWorker)
            per_bundle = self.request.workers_per_bundle
            workers = [actor.options(num_cpus=self.request.cpus_per_worker, num_gpus=self.request.gpus_per_worker,
                                     scheduling_strategy=PlacementGroupSchedulingStrategy(
                                         self._group, placement_group_bundle_index=i // per_bundle)).remote()
                       for i in range(self.num_workers)]
            self.workers = workers
            found = self._identities(workers)
            self.plan = slot_plan([f["ip"] for f in found])
            by_rank = sorted(range(len(workers)), key=lambda i: self.plan[i].rank)
            self.workers = [workers[i] for i in by_rank]
            found = [found[i] for i in by_rank]
            self.plan = [self.plan[i] for i in by_rank]
            self._configure(found, dict(extra_env_vars or {}))
            self._wait([w.start_executable.remote(executable_cls, executable_args, executable_kwargs)
                        for w in self.workers])
        except BaseException:
            self.shutdown()
            raise

    def _identities(self, workers: Sequence[Any]) -> List[Dict[str, Any]]:
        """Each actor's :meth:`~hvdkeras.ray.worker.RankWorker.identity`, checked against the driver's."""
        timeout = max(float(self.settings.timeout_s), 60.0)
        # _wait says it all: an actor that could not start (CannotStartError), a worker lost meanwhile
        # (RankExitedError, which the config trainer's attempts start again), no answer in time
        found = self._wait([w.identity.remote() for w in workers], timeout_s=timeout)
        check_workers(found)
        return found

    def _configure(self, found: Sequence[Dict[str, Any]], extra: Dict[str, str]) -> None:
        """The rendezvous started; each actor's environment set."""
        self._server, envs = start_rendezvous(self._ray.util.get_node_ip_address(), self.plan, found,
                                              self._wait([w.interface.remote(f["ip"], self.settings.nics)
                                                          for w, f in zip(self.workers, found)]),
                                              self.use_gpu, self.settings, extra)
        self._wait([w.setup.remote(env) for w, env in zip(self.workers, envs)])

    # -- run --------------------------------------------------------------------------------------------------------

    def run(self, fn: Callable[..., Any], args: Optional[Sequence[Any]] = None,
            kwargs: Optional[Dict[str, Any]] = None, callbacks: Optional[List[Callable[..., Any]]] = None) -> List[Any]:
        """``fn(*args, **kwargs)`` on every rank.

        Args:
            callbacks: each called, on the driver, with every value a rank logs through
                :func:`hvdkeras.ray.ray_logger.log` meanwhile.

        Returns:
            Each rank's return value, in rank order.

        Raises:
            HvdkerasError: the error a rank raised for a cause the user can fix.
            RankExitedError: a rank failed otherwise, or its actor or node was lost; the other ranks are ended.
        """
        if self._elastic is not None:
            return list(self._elastic.run(fn, callbacks=callbacks, args=args, kwargs=kwargs))
        self._started()
        with ray_logger.relay(self._ray, callbacks, lambda: self.workers):
            return self._wait(self.run_remote(fn, args, kwargs))

    def run_remote(self, fn: Callable[..., Any], args: Optional[Sequence[Any]] = None,
                   kwargs: Optional[Dict[str, Any]] = None) -> List[Any]:
        """``fn(*args, **kwargs)`` started on every rank.

        Returns:
            Ray's object refs, in rank order (``ray.get`` them).
        """
        self._started()
        return [w.run.remote(fn, list(args or []), dict(kwargs or {})) for w in self.workers]

    def execute(self, fn: Callable[[Any], Any], callbacks: Optional[List[Callable[..., Any]]] = None) -> List[Any]:
        """``fn(executable)`` on every rank, ``executable`` being the object of ``start(executable_cls=...)``;
        ``callbacks`` as :meth:`run`'s.

        Returns:
            Each rank's return value, in rank order.
        """
        if self._elastic is not None:
            return list(self._elastic.execute(fn, callbacks))
        self._started()
        with ray_logger.relay(self._ray, callbacks, lambda: self.workers):
            return self._wait([w.execute.remote(fn) for w in self.workers])

    def execute_single(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(executable)`` on rank 0 alone; returns its value."""
        self._started()
        return self._wait([self.workers[0].execute.remote(fn)])[0]

    def shutdown(self) -> None:
        """Ends the ranks' actors, frees their placement group and stops the rendezvous. Safe to call twice."""
        if self._elastic is not None:
            self._elastic.shutdown()
            return
        ray, workers, self.workers = self._ray, self.workers, []
        for worker in workers:
            try:
                ray.kill(worker, no_restart=True)
            except Exception:  # noqa: BLE001 - gone already
                pass
        if self._group is not None:
            from ray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(self._group)
            except Exception:  # noqa: BLE001 - the cluster removed it, or is gone
                pass
            self._group = None
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # -- waiting ----------------------------------------------------------------------------------------------------

    def _started(self) -> None:
        if self._elastic is not None:
            raise SetupError("an elastic RayExecutor (min_workers/max_workers) runs functions with run() or execute()"
                             " only: its ranks change as nodes come and go")
        if not self.workers:
            raise SetupError("this RayExecutor's ranks are not running: call start() first (after a failure, or"
                             " shutdown(), start() again)")

    def _wait(self, refs: Sequence[Any], timeout_s: Optional[float] = None) -> List[Any]:
        """Every ref's value in order; the first failure ends every rank and is raised (see :meth:`run`)."""
        ray = self._ray
        index = {ref: i for i, ref in enumerate(refs)}
        results: List[Any] = [None] * len(refs)
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=timeout_s)
            if not done:
                self.shutdown()
                raise failures.start_timeout(len(refs), float(timeout_s or 0), "Ray never started them",
                                             tasks="Ray actors")
            for ref in done:
                try:
                    results[index[ref]] = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - sorted out below
                    raise self._failed(index[ref], exc, [r for r in pending]) from None
        return results

    def _failed(self, first: int, error: BaseException, others: Sequence[Any]) -> BaseException:
        """What to raise for rank ``first``'s ``error``, once every rank is ended: a lost worker among the others'
        failures comes first (a rank's own failure then only says that a peer went away)."""
        ray = self._ray
        from ray.exceptions import RayActorError

        errors = [error]
        if not isinstance(error, RayActorError) and others:
            done, _ = ray.wait(list(others), num_returns=len(others), timeout=_OTHERS_FAIL_WITHIN_S)
            for ref in done:
                try:
                    ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - another rank's failure: read for a lost worker
                    errors.append(exc)
        hosts = [s.hostname for s in self.plan] if self.plan else []
        self.shutdown()
        lost = [e for e in errors if isinstance(e, RayActorError)]
        unstarted = [e for e in lost if e.actor_init_failed]  # e.g. a node whose Python cannot import hvdkeras
        if unstarted:
            return failures.CannotStartError(f"a Ray worker{node_of(unstarted[0])} could not start a rank's actor"
                                             f" ({cause_line(unstarted[0])}): {FIX_WORKERS}")
        if lost:
            where = f" on node {hosts[first]}" if first < len(hosts) and isinstance(error, RayActorError) else ""
            return failures.RankExitedError(f"a rank's Ray worker{where} was lost ({first_line(lost[0])})")
        cause = getattr(error, "cause", None) or error
        if isinstance(cause, _LOST_WORKER):
            return failures.RankExitedError(f"rank {first}: {cause}")
        if isinstance(cause, HvdkerasError):
            return cause
        where = f" on node {hosts[first]}" if first < len(hosts) else ""
        return failures.RankExitedError(f"rank {first}{where} failed: {type(cause).__name__}: {first_line(cause)}")


def start_rendezvous(driver_ip: str, plan: Sequence[Slot], found: Sequence[Dict[str, Any]],
                     ifaces: Sequence[Optional[str]], use_gpu: bool, settings: Settings,
                     extra: Dict[str, str]) -> Tuple[Any, List[Dict[str, str]]]:
    """Horovod's Gloo rendezvous on ``driver_ip``, answering only a new secret, and each rank's environment.

    Args:
        plan: each worker's slot (:func:`~hvdkeras.engines.placement.slot_plan` of their nodes).
        found: each worker's :func:`~hvdkeras.ray.worker.identity` (its node's address, its GPUs).
        ifaces: each worker's network interface for its node's address.
        use_gpu: whether ranks see the GPUs Ray gave them (else none).
        extra: variables every rank gets besides.

    Returns:
        The server (``shutdown()``, ``server_close()`` to stop it) and each worker's environment.
    """
    secret = rendezvous_server.gang_secret(secrets.token_hex(32))
    server = rendezvous_server.start(driver_ip, plan, secret, verbose=settings.verbose)
    address = (driver_ip, server.server_address[1])
    gpus = visible_gpus(plan, [f["gpus"] for f in found]) if use_gpu else ["-1"] * len(found)
    envs = []
    for slot, iface, visible in zip(plan, ifaces, gpus):
        env = rendezvous_server.rank_environment(slot, address, iface, secret)
        env["HOROVOD_GLOO_TIMEOUT_SECONDS"] = str(int(max(float(settings.timeout_s), 30)))
        if visible:
            env["CUDA_VISIBLE_DEVICES"] = visible
        env.update({str(k): str(v) for k, v in extra.items()})
        envs.append(env)
    return server, envs
