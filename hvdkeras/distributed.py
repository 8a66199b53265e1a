"""The one place that talks to Horovod's process state.

Everything else in hvdkeras asks this module for the rank, the number of ranks,
whether it is the chief, and for collectives. Only Horovod's plain TensorFlow ops
(``allreduce``, ``broadcast``, ``broadcast_object``) are used here, never its Keras
layer, so this module works unchanged on any Keras version Horovod's ops run on.

Process setup done by :func:`init`, in this order:

1. ``hvd.init()``.
2. GPU pinning: a process sees only the GPU at index ``local_rank`` of the host's
   GPU list, with memory growth on. The list is passed in (``gpus=``), so the rule
   is exercised on CPU-only machines with stand-in devices.
3. Thread budget on the host's cores, so ranks on one host do not oversubscribe:
   ``intra_op = max(1, cores // local_size)``, ``inter_op = max(1, intra_op // 4)``,
   each overridable in ``runtime``.
4. Seeds: Python, NumPy and TensorFlow seeded with ``runtime.seed + rank`` (initial
   weights still agree because they are broadcast from rank 0).
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import random
from typing import Any, Optional, Sequence

import numpy as np
import tensorflow as tf

import horovod.tensorflow as hvd

ROOT_RANK = 0


class SetupError(RuntimeError):
    """This process cannot be set up as asked (for example, no GPU left for its local rank)."""


class PreflightError(SetupError):
    """Ranks differ in something that must be identical (config, model, steps, versions)."""


# --------------------------------------------------------------------------- process state


def rank() -> int:
    return hvd.rank()


def size() -> int:
    return hvd.size()


def local_rank() -> int:
    return hvd.local_rank()


def local_size() -> int:
    return hvd.local_size()


def is_chief() -> bool:
    """True on rank 0, the one process that writes files and prints."""
    return hvd.rank() == ROOT_RANK


def launcher_rank() -> Optional[int]:
    """This process's rank as told by the launcher's environment, before ``hvd.init``.

    Used to print start-up errors once; None when not started by a known launcher.
    """
    for var in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return None


# --------------------------------------------------------------------------- setup


@dataclasses.dataclass(frozen=True)
class ThreadBudget:
    intra_op: int
    inter_op: int


def host_cores() -> int:
    """Cores this process may run on (respects taskset / cgroup CPU affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def thread_budget(cores: int, ranks_on_host: int, intra_op: Optional[int] = None,
                  inter_op: Optional[int] = None) -> ThreadBudget:
    """``intra_op = max(1, cores // ranks_on_host)``; ``inter_op = max(1, intra_op // 4)``."""
    intra = intra_op if intra_op is not None else max(1, cores // max(1, ranks_on_host))
    inter = inter_op if inter_op is not None else max(1, intra // 4)
    return ThreadBudget(intra_op=intra, inter_op=inter)


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


def pin_local_gpu(gpus: Sequence[Any], local_rank_: int, memory_growth: bool = True,
                  tf_config: Any = None) -> Optional[Any]:
    """Makes only ``gpus[local_rank_]`` visible to this process, with memory growth.

    ``tf_config`` defaults to ``tf.config``; tests pass a recorder with the same two
    methods (``set_visible_devices``, ``experimental.set_memory_growth``).
    """
    tf_config = tf.config if tf_config is None else tf_config
    gpu = select_local_gpu(gpus, local_rank_)
    if gpu is None:
        return None
    if memory_growth:
        tf_config.experimental.set_memory_growth(gpu, True)
    tf_config.set_visible_devices([gpu], "GPU")
    return gpu


def set_thread_budget(budget: ThreadBudget) -> bool:
    """Applies the budget; False (and no change) if TensorFlow's runtime already started."""
    try:
        tf.config.threading.set_intra_op_parallelism_threads(budget.intra_op)
        tf.config.threading.set_inter_op_parallelism_threads(budget.inter_op)
        return True
    except RuntimeError:
        return False


def set_seeds(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    tf.random.set_seed(seed)


@dataclasses.dataclass(frozen=True)
class ProcessInfo:
    rank: int
    size: int
    local_rank: int
    local_size: int
    threads: ThreadBudget
    gpu: Optional[str]
    threads_applied: bool

    @property
    def is_chief(self) -> bool:
        return self.rank == ROOT_RANK


def stall_environment(horovod_cfg: Any) -> dict:
    """Horovod's stall-inspector settings for a :class:`hvdkeras.config.HorovodConfig`.

    After ``stall_warning_seconds`` in a collective that not every rank has joined,
    Horovod logs which ranks are missing for which tensors; after
    ``stall_shutdown_seconds`` (0: never) it shuts the job down.
    """
    if horovod_cfg.stall_warning_seconds == 0:
        return {"HOROVOD_STALL_CHECK_DISABLE": "1"}
    return {"HOROVOD_STALL_CHECK_TIME_SECONDS": str(horovod_cfg.stall_warning_seconds),
            "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": str(horovod_cfg.stall_shutdown_seconds)}


CPU_CYCLE_TIME_MS = 10.0  # measured on 2-core CPU hosts with Gloo: steadier and faster than Horovod's 1 ms
GPU_CYCLE_TIME_MS = 1.0  # Horovod's own default
DEFAULT_CACHE_CAPACITY = 1024  # Horovod's own default


def resolve_horovod(horovod_cfg: Any, has_gpu: bool) -> Any:
    """``horovod_cfg`` with its automatic (null) knobs replaced by the values chosen for this host."""
    return dataclasses.replace(
        horovod_cfg,
        cycle_time_ms=horovod_cfg.cycle_time_ms or (GPU_CYCLE_TIME_MS if has_gpu else CPU_CYCLE_TIME_MS),
    )


def horovod_environment(horovod_cfg: Any, workdir: Optional[str] = None) -> dict:
    """The ``HOROVOD_*`` variables for a resolved :class:`hvdkeras.config.HorovodConfig`."""
    env = dict(stall_environment(horovod_cfg))
    env["HOROVOD_CYCLE_TIME"] = f"{horovod_cfg.cycle_time_ms:g}"
    if horovod_cfg.fusion_threshold_mb is not None:  # null: Horovod's own default
        env["HOROVOD_FUSION_THRESHOLD"] = str(int(horovod_cfg.fusion_threshold_mb) * 1024 * 1024)
    # Only what differs from Horovod's own defaults.
    if horovod_cfg.cache_capacity != DEFAULT_CACHE_CAPACITY:
        env["HOROVOD_CACHE_CAPACITY"] = str(horovod_cfg.cache_capacity)
    if horovod_cfg.hierarchical_allreduce:
        env["HOROVOD_HIERARCHICAL_ALLREDUCE"] = "1"
    if horovod_cfg.hierarchical_allgather:
        env["HOROVOD_HIERARCHICAL_ALLGATHER"] = "1"

    def place(path):
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


def init(runtime: Any, gpus: Optional[Sequence[Any]] = None, horovod_cfg: Any = None,
         workdir: Optional[str] = None) -> ProcessInfo:
    """Initialises Horovod and this process (see the module docstring).

    ``runtime`` is a :class:`hvdkeras.config.RuntimeConfig`, ``horovod_cfg`` a
    :class:`hvdkeras.config.HorovodConfig`: its knobs (resolved for this host by
    :func:`resolve_horovod`) reach Horovod through ``HOROVOD_*`` environment
    variables before ``hvd.init``; a variable already set by hand wins. Relative
    timeline and autotune-log paths are placed in ``workdir``. ``gpus`` defaults to
    the physical GPUs TensorFlow finds.
    """
    if gpus is None:
        gpus = tf.config.list_physical_devices("GPU")
    if horovod_cfg is not None:
        if workdir and (horovod_cfg.timeline or horovod_cfg.autotune_log):
            os.makedirs(workdir, exist_ok=True)
        for key, value in horovod_environment(resolve_horovod(horovod_cfg, bool(gpus)), workdir).items():
            os.environ.setdefault(key, value)  # an explicit environment variable wins
    hvd.init()
    gpu = pin_local_gpu(gpus, hvd.local_rank(), memory_growth=runtime.gpu_memory_growth)
    budget = thread_budget(host_cores(), hvd.local_size(), runtime.intra_op_threads, runtime.inter_op_threads)
    applied = set_thread_budget(budget) if gpu is None else False
    set_seeds(runtime.seed + hvd.rank())
    return ProcessInfo(
        rank=hvd.rank(), size=hvd.size(), local_rank=hvd.local_rank(), local_size=hvd.local_size(),
        threads=budget, gpu=getattr(gpu, "name", None), threads_applied=applied,
    )


# --------------------------------------------------------------------------- collectives
# Every rank must call these in the same order with the same names.


def allreduce_sum(values: np.ndarray, name: str) -> np.ndarray:
    """Element-wise sum over ranks of a float64 array (exact for counts below 2**53)."""
    tensor = tf.convert_to_tensor(np.asarray(values, dtype=np.float64))
    return hvd.allreduce(tensor, op=hvd.Sum, name=name).numpy()


def allreduce_max(values: np.ndarray, name: str) -> np.ndarray:
    """Element-wise maximum over ranks of a float64 array."""
    tensor = tf.convert_to_tensor(np.asarray(values, dtype=np.float64))
    return hvd.allreduce(tensor, op=hvd.Max, name=name).numpy()


def broadcast_array(values: np.ndarray, name: str, root_rank: int = ROOT_RANK) -> np.ndarray:
    """Rank ``root_rank``'s float64 array on every rank."""
    tensor = tf.convert_to_tensor(np.asarray(values, dtype=np.float64))
    return hvd.broadcast(tensor, root_rank=root_rank, name=name).numpy()


def any_rank(flag: bool, name: str) -> bool:
    """True on every rank if ``flag`` is true on at least one."""
    return bool(allreduce_sum(np.array([float(bool(flag))]), name=name)[0] > 0)


def root_decides(flag: bool, name: str, root_rank: int = ROOT_RANK) -> bool:
    """Rank ``root_rank``'s ``flag`` on every rank."""
    return bool(broadcast_array(np.array([float(bool(flag))]), name=name, root_rank=root_rank)[0] > 0)


def allgather_object(obj: Any, name: str) -> list:
    """Every rank's Python object, in rank order, on every rank (pickled)."""
    return hvd.allgather_object(obj, name=name)


def agree_min(value: int, name: str) -> int:
    """The smallest of every rank's ``value`` (for example steps per epoch), on every rank."""
    return int(min(allgather_object(int(value), name=name)))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def preflight(fields: dict, details: Optional[dict] = None, name: str = "hvdkeras.preflight") -> None:
    """Collective: every rank must hold the same ``fields``; otherwise all ranks raise the same PreflightError.

    ``fields`` maps a name to a small value (a hash, a version, a number); ``details``
    maps a field to a flat dict (for example the resolved config) used to name the
    keys that differ. The message names the field, the ranks and the values.
    """
    everyone = allgather_object({"fields": fields, "details": details or {}}, name=name)
    problems = []
    reference = everyone[0]
    for field in sorted(reference["fields"]):
        values = [r["fields"].get(field) for r in everyone]
        odd = [rank_ for rank_, v in enumerate(values) if v != values[0]]
        if not odd:
            continue
        what = f"{field} differs: rank 0 has {_short(values[0])}, " + ", ".join(
            f"rank {r} has {_short(values[r])}" for r in odd)
        ref_detail = reference["details"].get(field)
        if isinstance(ref_detail, dict):
            keys = []
            for r in odd:
                other = everyone[r]["details"].get(field) or {}
                for key in sorted(set(ref_detail) | set(other)):
                    if ref_detail.get(key) != other.get(key):
                        keys.append(f"{key}={_short(ref_detail.get(key))} on rank 0 but {_short(other.get(key))}"
                                    f" on rank {r}")
            if keys:
                what = f"{field} differs: " + "; ".join(keys[:5]) + (" ..." if len(keys) > 5 else "")
        problems.append(what)
    if problems:
        raise PreflightError("pre-flight check failed: " + " | ".join(problems)
                             + "; start every rank with the same code, config and --set overrides")


def broadcast_object(obj: Any, name: str, root_rank: int = ROOT_RANK) -> Any:
    """Rank ``root_rank``'s Python object on every rank (pickled)."""
    return hvd.broadcast_object(obj, root_rank=root_rank, name=name)


def broadcast_variables(variables: Sequence[tf.Variable], root_rank: int = ROOT_RANK) -> None:
    """Assigns rank ``root_rank``'s values to ``variables`` on every rank."""
    if variables:
        from hvdkeras import compat

        hvd.broadcast_variables(compat.tf_variables(variables), root_rank=root_rank)


def fingerprint(arrays: Sequence[np.ndarray]) -> str:
    """A hash of the exact bytes of ``arrays`` (order matters)."""
    digest = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        digest.update(str(a.dtype).encode())
        digest.update(str(a.shape).encode())
        digest.update(a.tobytes())
    return digest.hexdigest()


def ranks_disagreeing(arrays: Sequence[np.ndarray], name: str) -> int:
    """How many ranks hold values different from the root's (0: all agree). Collective."""
    mine = fingerprint(arrays)
    root = broadcast_object(mine, name=f"{name}.fingerprint")
    return int(allreduce_sum(np.array([float(mine != root)]), name=f"{name}.disagree")[0])

