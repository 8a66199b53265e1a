"""Horovod's settings as environment variables, and each rank's thread budget: pure, no Horovod, no TensorFlow.

The process part (``hvd.init``, pinning, collectives) is :mod:`hvdkeras.runtime.distributed`;
the dry run (:mod:`hvdkeras.launch`) and the benchmarks use this module without
starting either.

Thread budget, so ranks on one host do not oversubscribe its cores::

    intra_op = max(1, cores // ranks_on_host)
    inter_op = max(2, intra_op // 4)

each overridable in the ``runtime`` section. GPU pinning: the process with local rank
``r`` uses ``gpus[r]`` of its host (:func:`select_local_gpu`). CPU binding, its counterpart on CPU
hosts: the process with local rank ``r`` of ``k`` runs on its own block of the ``n`` cores the
ranks share, ``cores[r * n // k : (r + 1) * n // k]`` (:func:`cpu_binding`).
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, List, MutableMapping, Optional, Sequence, Tuple

from hvdkeras.common.errors import SetupError
from hvdkeras.config import HorovodConfig, RuntimeConfig

TROUBLESHOOTING_OPS = "docs/troubleshooting.md#horovods-tensorflow-ops-do-not-load"


def horovod_load_failure(error: BaseException, tensorflow_version: str) -> Optional[str]:
    """The one line for a failed ``import horovod.tensorflow``, or None for a failure of another kind.

    Args:
        error: what the import raised (an ``ImportError``, or TensorFlow's ``NotFoundError`` from loading the ops'
            library).
        tensorflow_version: the TensorFlow this process runs.

    Returns:
        What was wrong and the command that fixes it, naming the troubleshooting page.
    """
    text = str(error)
    first = (text.strip().splitlines() or [type(error).__name__])[0][:200]
    rebuild = f"python -m hvdkeras.build_horovod --rebuild in this environment ({TROUBLESHOOTING_OPS})"
    if isinstance(error, ModuleNotFoundError) and (error.name or "").split(".")[0] == "horovod":
        return (f"Horovod is not installed in this environment ({first}); build and install it for TensorFlow"
                f" {tensorflow_version}: python -m hvdkeras.build_horovod ({TROUBLESHOOTING_OPS})")
    if "has not been built" in text or "undefined symbol" in text or "mpi_lib" in text:
        return (f"Horovod's TensorFlow ops do not load in TensorFlow {tensorflow_version} ({first}): they were"
                f" built for another TensorFlow, or not at all; rebuild them: {rebuild}")
    return None


def launcher_rank() -> Optional[int]:
    """This process's rank as told by the launcher's environment, before ``hvd.init``.

    Used to print start-up errors once; None when not started by a known launcher.
    """
    for var in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return None


def launcher_job() -> Optional[str]:
    """What tells this job from another, the same on each of its processes (an elastic worker added later
    included), from the launcher's environment; None when not started by a known launcher."""
    addr, port = os.environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR"), os.environ.get("HOROVOD_GLOO_RENDEZVOUS_PORT")
    if addr and port:
        return f"horovodrun {addr}:{port}"
    for var, kind in (("PMIX_NAMESPACE", "mpirun"), ("OMPI_MCA_orte_hnp_uri", "mpirun"), ("SLURM_JOB_ID", "slurm")):
        if os.environ.get(var):
            step = os.environ.get("SLURM_STEP_ID", "") if kind == "slurm" else ""
            return f"{kind} {os.environ[var]}" + (f".{step}" if step else "")
    return None


@dataclasses.dataclass(frozen=True)
class ThreadBudget:
    """TensorFlow's intra-op and inter-op thread counts for one rank."""

    intra_op: int
    inter_op: int


def host_cores() -> int:
    """Cores this process may run on (respects taskset / cgroup CPU affinity): ``len(allowed_cpus())``."""
    return len(allowed_cpus())


def thread_budget(cores: int, ranks_on_host: int, intra_op: Optional[int] = None,
                  inter_op: Optional[int] = None) -> ThreadBudget:
    """``intra_op = max(1, cores // ranks_on_host)``; ``inter_op = max(2, intra_op // 4)``.

    At least two inter-op threads: with one, the op that hands a ready gradient to Horovod waits in
    that thread's queue behind the backward pass's compute ops, so the exchange starts late and
    overlaps little; with two it overlaps the backward pass, and on one host the two are level
    (docs/performance.md#the-fp32-rows-and-the-inter-op-threads). The second thread mostly waits:
    it adds no compute of its own.
    """
    intra = intra_op if intra_op is not None else max(1, cores // max(1, ranks_on_host))
    inter = inter_op if inter_op is not None else max(2, intra // 4)
    return ThreadBudget(intra_op=intra, inter_op=inter)


def parse_cpu_list(text: str) -> Tuple[int, ...]:
    """A kernel CPU list (``0-3,6``, as in ``cpuset.cpus`` or ``taskset -c``) as sorted core numbers."""
    cores: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cores.update(range(int(low), int(high or low) + 1))
    return tuple(sorted(cores))


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read().strip() or None
    except OSError:
        return None


def shared_cpus(proc_root: str = "/proc", sys_root: str = "/sys") -> Tuple[int, ...]:
    """The cores every process of this job on this host may use: its cgroup's cpuset, else the online cores.

    A container's or a Slurm step's cpuset limits all its ranks alike; a narrower affinity in one
    process (``taskset``, ``mpirun --bind-to core``, ``srun --cpu-bind``) was set for that process.
    Reads cgroup v2 (``cpuset.cpus.effective``) and v1 (``cpuset.effective_cpus``).
    """
    for line in (_read(os.path.join(proc_root, "self", "cgroup")) or "").splitlines():
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hierarchy == "0" and controllers == "":
            text = _read(os.path.join(sys_root, "fs", "cgroup", path.lstrip("/"), "cpuset.cpus.effective"))
        elif "cpuset" in controllers.split(","):
            text = _read(os.path.join(sys_root, "fs", "cgroup", "cpuset", path.lstrip("/"), "cpuset.effective_cpus"))
        else:
            continue
        if text:
            return parse_cpu_list(text)
    online = _read(os.path.join(sys_root, "devices", "system", "cpu", "online"))
    return parse_cpu_list(online) if online else tuple(range(os.cpu_count() or 1))


def allowed_cpus() -> Tuple[int, ...]:
    """The cores this process may run on now (its affinity)."""
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return tuple(range(os.cpu_count() or 1))


@dataclasses.dataclass(frozen=True)
class CpuBinding:
    """The cores one rank is to run on (empty: leave its affinity alone) and why, in words for its start-up line."""

    cpus: Tuple[int, ...]
    reason: str

    def describe(self) -> str:
        """The binding in words, for the rank's start-up line."""
        if not self.cpus:
            return f"unbound ({self.reason})"
        return f"cores {format_cpu_list(self.cpus)} ({self.reason})"


def format_cpu_list(cpus: Sequence[int]) -> str:
    """``(0, 1, 2, 5)`` -> ``0-2,5`` (the inverse of :func:`parse_cpu_list`)."""
    runs: List[List[int]] = []
    for c in sorted(cpus):
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def cpu_binding(setting: str, allowed: Sequence[int], shared: Sequence[int], local_rank_: int,
                ranks_on_host: int) -> CpuBinding:
    """``runtime.cpu_binding`` decided for one rank: rank ``r`` of ``k`` on a host whose ranks share ``n`` cores
    gets ``shared[r * n // k : (r + 1) * n // k]``.

    Every rank decides alone and alike (no collective). It binds only with ``auto``, several ranks on
    the host, at least one core each, and a process the launcher left unbound (its ``allowed`` cores are
    all of ``shared``): a launcher's binding (``mpirun --bind-to core``, ``srun --cpu-bind``, the lab's
    ``taskset``) is kept. The thread budget is computed from ``n`` first, so each rank's intra-op threads
    match its block. Why: unbound, the ranks' compute threads, Horovod's background threads and
    TensorFlow's inter-op threads migrate between the cores, and the ranks wait for each other at
    every step; bound, each rank keeps its core, and the ranks train faster
    (docs/performance.md#one-host-cpu-binding).
    """
    shared = tuple(sorted(shared))
    n, k = len(shared), max(1, ranks_on_host)
    if setting == "none":
        return CpuBinding((), "runtime.cpu_binding: none")
    if k == 1:
        return CpuBinding((), "the only rank on this host")
    if not set(shared) <= set(allowed):
        return CpuBinding((), f"the launcher bound this rank to cores {format_cpu_list(allowed)}")
    if n < k:
        return CpuBinding((), f"{n} core(s) for {k} ranks on this host")
    return CpuBinding(shared[local_rank_ * n // k:(local_rank_ + 1) * n // k],
                      f"local rank {local_rank_} of {k} on {n} cores (auto)")


def stall_environment(horovod_cfg: HorovodConfig) -> Dict[str, str]:
    """Horovod's stall-inspector settings for a :class:`hvdkeras.config.HorovodConfig`.

    After ``stall_warning_seconds`` in a collective that not every rank has joined,
    Horovod logs which ranks are missing for which tensors; after
    ``stall_shutdown_seconds`` (0: never) it shuts the job down.
    """
    if horovod_cfg.stall_warning_seconds == 0:
        return {"HOROVOD_STALL_CHECK_DISABLE": "1"}
    return {"HOROVOD_STALL_CHECK_TIME_SECONDS": str(horovod_cfg.stall_warning_seconds),
            "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": str(horovod_cfg.stall_shutdown_seconds)}


DEFAULT_CACHE_CAPACITY = 1024  # Horovod's own default
# Read by hvdkeras's Horovod build only: build_horovod/patches/0008-idle-background-loop-waits-for-work.patch
IDLE_WAIT_VARIABLE = "HVDKERAS_IDLE_WAIT_MS"


def resolve_horovod(horovod_cfg: HorovodConfig, multi_host: bool = False) -> HorovodConfig:
    """``horovod_cfg`` with its automatic choices made for this job.

    * ``compression: auto``: ``fp16`` when the ranks span several hosts (``multi_host``; every rank
      must decide alike, so pass ``size > local_size``, true on all ranks or none), else ``none``.

    ``cycle_time_ms`` and ``fusion_threshold_mb`` null stay null: Horovod's own defaults apply, on
    GPU and CPU hosts alike.
    """
    return dataclasses.replace(horovod_cfg, compression=resolve_compression(horovod_cfg.compression, multi_host))


def resolve_compression(compression: str, multi_host: bool) -> str:
    """``compression`` with ``auto`` decided: ``fp16`` when the ranks span several hosts, else ``none``."""
    if compression == "auto":
        return "fp16" if multi_host else "none"
    return compression


def auto_reasons(requested_horovod: HorovodConfig, requested_runtime: RuntimeConfig, resolved: HorovodConfig,
                 threads: ThreadBudget, *, multi_host: bool, cores: int, ranks_on_host: int) -> Dict[str, str]:
    """``{key: why}`` for every key whose value was chosen for the user (null or ``auto`` in the config).

    The dry run and the start-up lines mark these values ``(auto)``, and ``<workdir>/config.yaml``
    carries the reason next to the value.
    """
    why: Dict[str, str] = {}
    if requested_horovod.compression == "auto":
        why["horovod.compression"] = (f"{resolved.compression}: the ranks span "
                                      + ("several hosts" if multi_host else "one host"))
    if requested_runtime.intra_op_threads is None:
        why["runtime.intra_op_threads"] = f"cores // ranks on this host = {cores} // {ranks_on_host}"
    if requested_runtime.inter_op_threads is None:
        why["runtime.inter_op_threads"] = f"intra-op {threads.intra_op} // 4, at least 2"
    return why


# What the lab of record found for fp16, without a figure: the figures live in docs/performance.md alone (the
# anchor is checked by tests/unit/docs/test_docs.py).
FP16_LAB_FIGURE = ("in the lab of record, whose hosts have one core each, fp16 was not faster than float32:"
                   " docs/performance.md#fp16-level-with-horovods-recipe-and-the-bound-on-the-ratio")


def compression_advice(compression: str, multi_host: bool) -> Optional[str]:
    """One line offering fp16 when the ranks span hosts with exact float32 averages; else None."""
    if not multi_host or compression != "none":
        return None
    return ("the ranks span several hosts and horovod.compression is none (exact float32 averages): if the"
            " network, not the cores, limits this job, horovod.compression=fp16 halves the gradient bytes"
            f" ({FP16_LAB_FIGURE})")


def horovod_environment(horovod_cfg: HorovodConfig, workdir: Optional[str] = None) -> Dict[str, str]:
    """The ``HOROVOD_*`` variables for a resolved :class:`hvdkeras.config.HorovodConfig`."""
    env = dict(stall_environment(horovod_cfg))
    if horovod_cfg.cycle_time_ms is not None:  # null: Horovod's own default (1 ms)
        env["HOROVOD_CYCLE_TIME"] = f"{horovod_cfg.cycle_time_ms:g}"
    if horovod_cfg.idle_wait_ms > 0:  # read by hvdkeras's Horovod build only (patch 0008); unset: Horovod's loop
        env[IDLE_WAIT_VARIABLE] = f"{horovod_cfg.idle_wait_ms:g}"
    if horovod_cfg.fusion_threshold_mb is not None:  # null: Horovod's own default
        env["HOROVOD_FUSION_THRESHOLD"] = str(int(horovod_cfg.fusion_threshold_mb) * 1024 * 1024)
    # Only what differs from Horovod's own defaults.
    if horovod_cfg.cache_capacity != DEFAULT_CACHE_CAPACITY:
        env["HOROVOD_CACHE_CAPACITY"] = str(horovod_cfg.cache_capacity)
    if horovod_cfg.hierarchical_allreduce:
        env["HOROVOD_HIERARCHICAL_ALLREDUCE"] = "1"
    if horovod_cfg.hierarchical_allgather:
        env["HOROVOD_HIERARCHICAL_ALLGATHER"] = "1"

    def place(path: str) -> str:
        return path if os.path.isabs(path) or workdir is None else os.path.join(workdir, path)

    if horovod_cfg.timeline:
        env["HOROVOD_TIMELINE"] = place(horovod_cfg.timeline)
        if horovod_cfg.timeline_mark_cycles:
            env["HOROVOD_TIMELINE_MARK_CYCLES"] = "1"
    if horovod_cfg.autotune:
        env["HOROVOD_AUTOTUNE"] = "1"
        if horovod_cfg.autotune_log:
            env["HOROVOD_AUTOTUNE_LOG"] = place(horovod_cfg.autotune_log)
    return env


# Where :func:`apply_environment` records what it set, so the next job in the process can tell its own
# earlier values (replaced) from values set by hand (kept, and named).
APPLIED_VARIABLE = "HVDKERAS_APPLIED_HOROVOD_ENV"


def apply_environment(wanted: Dict[str, str], environ: MutableMapping[str, str]) -> List[str]:
    """Puts ``wanted`` (:func:`horovod_environment`) into ``environ`` in one step; one line per value set by hand.

    * a variable hvdkeras set for an earlier job in this process is replaced, or removed when this
      job does not want it (a second job does not inherit the first one's timeline or cycle time);
    * a variable set by hand (in the environment before hvdkeras, or changed since) is kept: it
      wins over the config, and the returned line names both values.
    """
    previous: Dict[str, str] = json.loads(environ.get(APPLIED_VARIABLE, "{}"))
    notes: List[str] = []
    for key, value in previous.items():
        if key not in wanted and environ.get(key) == value:
            del environ[key]
    applied: Dict[str, str] = {}
    for key, value in wanted.items():
        current = environ.get(key)
        if current is None or current == value or previous.get(key) == current:
            environ[key] = value
            applied[key] = value
        else:
            notes.append(f"{key}={current} from the environment is used instead of the config's {value}"
                         " (unset it to use the config)")
    environ[APPLIED_VARIABLE] = json.dumps(applied)
    return notes


def select_local_gpu(gpus: Sequence[Any], local_rank_: int) -> Optional[Any]:
    """The GPU a process with ``local_rank_`` uses: ``gpus[local_rank_]``; None if ``gpus`` is empty."""
    if not gpus:
        return None
    if local_rank_ >= len(gpus):
        raise SetupError(
            f"local rank {local_rank_} has no GPU: this host has {len(gpus)} GPU(s); start at most "
            f"{len(gpus)} processes per host (e.g. horovodrun -H host:{len(gpus)})"
        )
    return gpus[local_rank_]

