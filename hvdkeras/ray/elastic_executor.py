"""``ElasticRayExecutor``: an elastic Horovod job on Ray, with ``horovod.ray.ElasticRayExecutor``'s arguments and
methods, on public Ray APIs only.

Horovod's own elastic driver (``horovod.runner.elastic.driver.ElasticDriver``, the one ``horovodrun --min-np``
runs) decides which ranks run where and when the job resizes. This module gives it what Horovod's Ray adapter gave it
and Ray no longer has in public:

* the hosts and their slots, from ``ray.nodes()`` (:func:`node_slots`): a node's CPUs (and GPUs, with
  ``use_gpu``) divided by what one worker takes; a node that leaves the cluster leaves the job;
* one :class:`~hvdkeras.ray.worker.RankWorker` actor per slot, held on its node by Ray's
  ``NodeAffinitySchedulingStrategy`` (Horovod's used a ``node:<ip>`` resource and, in its tests, Ray's private
  ``kill_node``); each is checked as :class:`~hvdkeras.ray.executor.RayExecutor` checks its workers;
* Horovod's elastic rendezvous on the driver's node address, answering only the job's secret (Horovod build patch
  0010), which each actor gets in its environment with its slot, its node's network interface and
  ``HOROVOD_ELASTIC=1``.

A worker lost with its node (an actor that dies) is a failed slot: Horovod's driver blacklists the host, the ranks
left roll back to their last commit and go on with fewer ranks, and more join again when nodes do
(``hvd.elastic.run``, ``hvd.elastic.KerasState``: :mod:`hvdkeras.keras.elastic`). An error raised by the training
function itself is not a lost host: it ends the job at once and is raised, as :class:`RayExecutor`'s are, instead
of blacklisting every host in turn and waiting ``elastic_timeout`` for slots that would never come.
"""
from __future__ import annotations

import dataclasses
import math
import secrets
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from hvdkeras.common import log
from hvdkeras.common.errors import HvdkerasError, SetupError
from hvdkeras.engines import failures, rendezvous_server
from hvdkeras.engines.placement import Slot
from hvdkeras.ray import cluster, ray_logger
from hvdkeras.ray.worker_checks import FIX_WORKERS, cause_line, check_workers, first_line

_POLL_S = 0.1  # how often a slot's thread looks at its rank and at the driver's events


@dataclasses.dataclass
class ElasticSettings:
    """What ``ElasticRayExecutor.create_settings`` returns (Horovod's ``ElasticSettings``, the fields Ray uses).

    Args:
        min_num_proc: the fewest ranks the job trains with; with fewer slots it waits for more.
        max_num_proc: the most ranks (None: every slot the cluster has).
        reset_limit: how many resizes the job may go through before it stops (None: no limit).
        elastic_timeout: how long the job waits for ``min_num_proc`` slots, at the start and after a loss.
        timeout_s: how long a rank's actor may take to start.
        nics: the network interfaces the ranks may use (None: the one that holds each node's Ray address).
        cooldown_range: how long (min, max seconds) a failed host stays blacklisted (None: for good).
        verbose: Horovod's verbosity of its driver and rendezvous.
    """

    min_num_proc: int = 1
    max_num_proc: Optional[int] = None
    reset_limit: Optional[int] = None
    elastic_timeout: float = 600
    timeout_s: float = 30
    nics: Optional[Sequence[str]] = None
    cooldown_range: Optional[Tuple[int, int]] = None
    verbose: int = 0
    ssh_identity_file: Optional[str] = None

    def __post_init__(self) -> None:
        if self.min_num_proc < 1 or (self.max_num_proc is not None and self.max_num_proc < self.min_num_proc):
            raise SetupError("an elastic job needs 1 <= min_num_proc <= max_num_proc (Received:"
                             f" min_num_proc={self.min_num_proc}, max_num_proc={self.max_num_proc})")


def node_slots(nodes: Sequence[Dict[str, Any]], cpus_per_worker: float, gpus_per_worker: float) -> Dict[str, int]:
    """How many workers each alive node can hold, by its address (``ray.nodes()``' entries).

    Args:
        nodes: ``ray.nodes()``.
        cpus_per_worker: CPUs one worker takes.
        gpus_per_worker: GPUs one worker takes (0: GPUs are not counted).

    Returns:
        ``{address: slots}`` for the alive nodes with at least one slot, in Ray's order.
    """
    slots: Dict[str, int] = {}
    for node in nodes:
        if not node.get("Alive", node.get("alive")):
            continue
        resources = node.get("Resources", {})
        count = math.floor(resources.get("CPU", 0) / cpus_per_worker + 1e-9) if cpus_per_worker else math.inf
        if gpus_per_worker:
            count = min(count, math.floor(resources.get("GPU", 0) / gpus_per_worker + 1e-9))
        if count and count != math.inf:
            slots[node["NodeManagerAddress"]] = int(count)
    return slots


def slot_environment(slot: Slot, rendezvous: Tuple[str, int], iface: Optional[str], secret: str,
                     gpus: Optional[Sequence[str]], timeout_s: float, extra: Dict[str, str]) -> Dict[str, str]:
    """An elastic rank's environment: its slot, the elastic rendezvous and its secret, its node's interface, and its
    GPUs: the ones Ray gave its actor (``gpus``), none at all when ``gpus`` is None (``use_gpu=False``)."""
    env = rendezvous_server.rank_environment(slot, rendezvous, iface, secret)
    env["HOROVOD_ELASTIC"] = "1"
    env["HOROVOD_GLOO_TIMEOUT_SECONDS"] = str(int(max(float(timeout_s), 30)))
    env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus) if gpus else ("" if gpus is not None else "-1")
    env.update({str(k): str(v) for k, v in extra.items()})
    return env


class _RayDiscovery:
    """Horovod's ``HostDiscovery`` from the cluster's alive nodes (:func:`node_slots`); keeps each address's node id
    for the actors' node affinity."""

    def __init__(self, ray: Any, cpus_per_worker: float, gpus_per_worker: float):
        self._ray = ray
        self.cpus_per_worker = cpus_per_worker
        self.gpus_per_worker = gpus_per_worker
        self.node_ids: Dict[str, str] = {}

    def find_available_hosts_and_slots(self) -> Dict[str, int]:
        """Horovod's discovery call: ``{host: slots}``."""
        nodes = self._ray.nodes()
        for node in nodes:
            if node.get("Alive"):
                self.node_ids[node["NodeManagerAddress"]] = node["NodeID"]
        return node_slots(nodes, self.cpus_per_worker, self.gpus_per_worker)


class ElasticRayExecutor:
    """An elastic Horovod job on the Ray cluster (``horovod.ray.ElasticRayExecutor``): ranks come and go with its
    nodes, between ``min_num_proc`` and ``max_num_proc`` of :meth:`create_settings`.

    Args:
        settings: from :meth:`create_settings`.
        use_gpu: whether ranks use GPUs; each rank then sees the GPUs Ray gave its actor (index 0 is its own),
            without, none at all.
        cpus_per_slot: CPUs each rank's actor takes (``cpus_per_worker`` is the same).
        gpus_per_slot: GPUs each rank's actor takes (1 with ``use_gpu``; ``gpus_per_worker`` is the same).
        env_vars: set in every rank's actor before its function runs.
        override_discovery: accepted for Horovod's signature: the hosts always come from the cluster's nodes.
    """

    @staticmethod
    def create_settings(min_num_proc: int = 1, max_num_proc: Optional[int] = None, reset_limit: Optional[int] = None,
                        elastic_timeout: float = 600, timeout_s: float = 30, ssh_identity_file: Optional[str] = None,
                        nics: Optional[Sequence[str]] = None, min_np: Optional[int] = None,
                        max_np: Optional[int] = None, cooldown_range: Optional[Tuple[int, int]] = None,
                        verbose: Any = 0, **unused: Any) -> ElasticSettings:
        """Horovod's settings for an elastic Ray job (``min_np``/``max_np``: Horovod's older names for
        ``min_num_proc``/``max_num_proc``); ssh settings are accepted and unused (the ranks meet through the
        rendezvous, not ssh)."""
        del unused
        return ElasticSettings(min_num_proc=min_np if min_np is not None else min_num_proc,
                               max_num_proc=max_np if max_np is not None else max_num_proc,
                               reset_limit=reset_limit, elastic_timeout=elastic_timeout, timeout_s=timeout_s,
                               nics=tuple(nics) if nics else None, cooldown_range=cooldown_range,
                               verbose=int(bool(verbose)) if isinstance(verbose, bool) else int(verbose),
                               ssh_identity_file=ssh_identity_file)

    def __init__(self, settings: Optional[ElasticSettings] = None, use_gpu: bool = False,
                 cpus_per_slot: float = 1, gpus_per_slot: Optional[float] = None,
                 env_vars: Optional[Dict[str, str]] = None, override_discovery: bool = True,
                 cpus_per_worker: Optional[float] = None, gpus_per_worker: Optional[float] = None):
        del override_discovery
        cpus = cpus_per_worker if cpus_per_worker is not None else cpus_per_slot
        gpus = gpus_per_worker if gpus_per_worker is not None else gpus_per_slot
        if gpus and not use_gpu:
            raise SetupError(f"gpus_per_slot={gpus:g} needs use_gpu=True (Received: use_gpu={use_gpu})")
        if not cpus or cpus <= 0:
            raise SetupError(f"cpus_per_slot must be above 0 (Received: {cpus})")
        self.settings = settings or ElasticSettings()
        self.use_gpu = use_gpu
        self.cpus_per_worker = float(cpus)
        self.gpus_per_worker = float(gpus or (1 if use_gpu else 0))
        self.env_vars = dict(env_vars or {})
        self._ray: Any = None
        self._driver: Any = None
        self._rendezvous: Any = None
        self._discovery: Optional[_RayDiscovery] = None
        self._address: Tuple[str, int] = ("", 0)
        self._secret = ""
        self._executable: Tuple[Optional[type], List[Any], Dict[str, Any]] = (None, [], {})
        self._lock = threading.Lock()
        self._actors: List[Any] = []
        self._values: List[Tuple[int, Any]] = []
        self._fatal: Optional[BaseException] = None
        self._queue: Any = None  # the ray_logger relay's, while a run with callbacks goes on
        self._stopped = False

    @property
    def num_workers(self) -> int:
        """How many ranks the job starts with (``min_num_proc``)."""
        return self.settings.min_num_proc

    def start(self, executable_cls: Optional[type] = None, executable_args: Optional[list] = None,
              executable_kwargs: Optional[dict] = None, extra_env_vars: Optional[Dict[str, str]] = None) -> None:
        """Joins the cluster and starts the elastic driver and its authenticated rendezvous (no rank starts before
        :meth:`run`).

        Raises:
            SetupError: Ray missing or the cluster unreachable; a cluster that cannot hold ``min_num_proc`` workers
                now, said at once with what it has (the driver would wait ``elastic_timeout`` for more).
        """
        if self._driver is not None:
            raise SetupError("this ElasticRayExecutor has started already: call shutdown() before start() again")
        from horovod.runner.elastic.driver import ElasticDriver
        from horovod.runner.elastic.rendezvous import create_rendezvous_handler
        from horovod.runner.http.http_server import RendezvousServer

        ray = self._ray = cluster.connect()
        self._discovery = _RayDiscovery(ray, self.cpus_per_worker, self.gpus_per_worker)
        slots = self._discovery.find_available_hosts_and_slots()
        if sum(slots.values()) < self.settings.min_num_proc:
            per = f"{self.cpus_per_worker:g} CPU" + (f" and {self.gpus_per_worker:g} GPU" if self.use_gpu else "")
            log.warning(f"ElasticRayExecutor: the cluster holds {sum(slots.values())} workers of {per} now, fewer"
                        f" than min_num_proc={self.settings.min_num_proc}: waiting up to"
                        f" elastic_timeout={self.settings.elastic_timeout:g} s for nodes to join")
        self._secret = rendezvous_server.gang_secret(secrets.token_hex(32))
        self._rendezvous = RendezvousServer(self.settings.verbose, self._secret)
        self._driver = ElasticDriver(rendezvous=self._rendezvous, discovery=self._discovery,
                                     min_num_proc=self.settings.min_num_proc, max_num_proc=self.settings.max_num_proc,
                                     timeout=int(self.settings.elastic_timeout), reset_limit=self.settings.reset_limit,
                                     cooldown_range=self.settings.cooldown_range, verbose=self.settings.verbose)
        driver_ip = ray.util.get_node_ip_address()
        port = self._rendezvous.start(create_rendezvous_handler(self._driver), host=driver_ip)
        self._address = (driver_ip, int(port))
        self._executable = (executable_cls, list(executable_args or []), dict(executable_kwargs or {}))
        self.env_vars.update({str(k): str(v) for k, v in (extra_env_vars or {}).items()})
        self._stopped = False

    def run(self, worker_fn: Callable[..., Any], callbacks: Optional[List[Callable[..., Any]]] = None,
            args: Optional[Sequence[Any]] = None, kwargs: Optional[Dict[str, Any]] = None) -> List[Any]:
        """``worker_fn(*args, **kwargs)`` on every rank, through every resize, until the ranks of the last one
        return; ``callbacks`` each called, on the driver, with every value a rank logs through
        :func:`hvdkeras.ray.ray_logger.log`.

        Returns:
            The return values of the ranks that finished the job, in rank order.

        Raises:
            HvdkerasError: the error a rank raised for a cause the user can fix.
            RankExitedError: a rank's function failed otherwise, the job ran out of slots within
                ``elastic_timeout``, or it went through more than ``reset_limit`` resizes.
        """
        if self._driver is None:
            raise SetupError("this ElasticRayExecutor is not started: call start() first")

        def call(_executable: Any) -> Any:
            return worker_fn(*(args or []), **(kwargs or {}))

        return self._run(call, callbacks)

    def execute(self, fn: Callable[[Any], Any], callbacks: Optional[List[Callable[..., Any]]] = None) -> List[Any]:
        """``fn(executable)`` on every rank (``executable``: the object of ``start(executable_cls=...)``);
        ``callbacks`` as :meth:`run`'s."""
        if self._driver is None:
            raise SetupError("this ElasticRayExecutor is not started: call start() first")
        return self._run(fn, callbacks)

    def _run(self, call: Callable[[Any], Any], callbacks: Optional[List[Callable[..., Any]]]) -> List[Any]:
        self._values, self._fatal = [], None
        with ray_logger.relay(self._ray, callbacks, lambda: []) as queue:  # each rank's actor gets it in _slot
            self._queue = queue
            try:
                return self._run_driver(call)
            finally:
                self._queue = None

    def _run_driver(self, call: Callable[[Any], Any]) -> List[Any]:
        from horovod.runner.common.util.timeout import TimeoutException

        try:
            try:
                self._driver.start(self.settings.min_num_proc, lambda slot, events: self._slot(slot, events, call))
            except TimeoutException:
                raise SetupError(f"the Ray cluster did not hold min_num_proc={self.settings.min_num_proc} workers of"
                                 f" {self.cpus_per_worker:g} CPU within elastic_timeout="
                                 f"{self.settings.elastic_timeout:g} s: add nodes, or ask for fewer workers or fewer"
                                 " CPUs/GPUs per worker") from None
            results = self._driver.get_results()
        finally:
            self.shutdown()
        if self._fatal is not None:
            raise self._fatal
        if results.error_message is not None:
            raise failures.RankExitedError(f"the elastic job stopped: {first_line(Exception(results.error_message))}")
        for name, (code, _) in sorted(results.worker_results.items(), key=lambda item: item[1][1]):
            if code != 0:
                raise failures.RankExitedError(f"the rank at {name} ended the elastic job with status {code}")
        return [value for _, value in sorted(self._values, key=lambda item: item[0])]

    def _slot(self, slot_info: Any, events: Sequence[threading.Event],
              call: Callable[[Any], Any]) -> Tuple[int, float]:
        """One rank of one round, as Horovod's driver starts it: its actor on the slot's node, checked, set up, run;
        ``(exit code, when)`` for the driver (1: the slot failed, its host is blacklisted)."""
        ray = self._ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from hvdkeras.ray.worker import RankWorker

        assert self._discovery is not None
        slot = Slot(hostname=slot_info.hostname, rank=slot_info.rank, local_rank=slot_info.local_rank,
                    cross_rank=slot_info.cross_rank, size=slot_info.size, local_size=slot_info.local_size,
                    cross_size=slot_info.cross_size)
        node_id = self._discovery.node_ids.get(slot.hostname)
        if node_id is None or self._stopped:
            return 1, time.time()
        actor = ray.remote(RankWorker).options(
            num_cpus=self.cpus_per_worker, num_gpus=self.gpus_per_worker if self.use_gpu else 0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)).remote()
        with self._lock:
            self._actors.append(actor)
        try:
            try:
                (found,) = ray.get([actor.identity.remote()], timeout=max(float(self.settings.timeout_s), 60.0))
            except (GetTimeoutError, RayActorError) as exc:
                if self._node_alive(node_id):  # not a lost node: a node that cannot start a rank
                    self._stop_with(failures.CannotStartError(
                        f"a Ray worker on node {slot.hostname} could not start a rank's actor ({cause_line(exc)}):"
                        f" {FIX_WORKERS}"))
                return 1, time.time()
            check_workers([found])
            iface = ray.get(actor.interface.remote(found["ip"], self.settings.nics))
            env = slot_environment(slot, self._address, iface, self._secret,
                                   found["gpus"] if self.use_gpu else None, self.settings.timeout_s, self.env_vars)
            ray.get(actor.setup.remote(env))
            if self._queue is not None:
                ray.get(actor.set_queue.remote(self._queue))
            ray.get(actor.start_executable.remote(*self._executable))
            ref = actor.execute.remote(call)
            while True:
                done, _ = ray.wait([ref], timeout=_POLL_S)
                if done:
                    value = ray.get(ref)
                    # its rank now: a rank that survived a resize may have another than it started with
                    now = self._driver.get_slot_info(slot.hostname, slot.local_rank)
                    with self._lock:
                        self._values.append((now.rank if now.rank >= 0 else slot.rank, value))
                    return 0, time.time()
                if any(event.is_set() for event in events):  # the job stopped, or this host left it
                    return 1, time.time()
        except RayActorError:  # its actor or node was lost: Horovod's driver blacklists the host and resizes
            return 1, time.time()
        except RayTaskError as exc:
            cause = getattr(exc, "cause", None) or exc
            self._stop_with(cause if isinstance(cause, HvdkerasError) else failures.RankExitedError(
                f"rank {slot.rank} on node {slot.hostname} failed: {type(cause).__name__}: {first_line(cause)}"))
            return 1, time.time()
        except HvdkerasError as exc:  # check_workers' refusal
            self._stop_with(exc)
            return 1, time.time()
        finally:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - gone already
                pass

    def _node_alive(self, node_id: str) -> bool:
        return any(n.get("NodeID") == node_id and n.get("Alive") for n in self._ray.nodes())

    def _stop_with(self, error: BaseException) -> None:
        """Ends the job for ``error``, which :meth:`run` raises (the first one only)."""
        with self._lock:
            if self._fatal is None:
                self._fatal = error
        self._stop_driver(first_line(error))

    def _stop_driver(self, message: Optional[str] = None) -> None:
        with self._lock:
            if self._stopped or self._driver is None:
                return
            self._stopped = True
        if not self._driver.finished():  # it stops itself when the last round's ranks have all returned
            self._driver.stop(error_message=message)

    def shutdown(self) -> None:
        """Stops the driver and its rendezvous and ends every rank's actor. Safe to call twice."""
        self._stop_driver()
        with self._lock:
            actors, self._actors = self._actors, []
        for actor in actors:
            try:
                self._ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - gone already
                pass
        self._driver = None
