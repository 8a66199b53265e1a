"""The one place that talks to Horovod's process state: its initialisation, the rank and the number of ranks.

Everything else in hvdkeras that runs inside a rank asks this module for the rank, the number of ranks,
whether it is the chief, and for the collectives of its own bookkeeping; the gradient exchange and the
Estimator's graph hooks call Horovod's ops themselves. The exceptions are Horovod's names that
:mod:`hvdkeras.keras` and :mod:`hvdkeras.tensorflow` re-export for your scripts, :mod:`hvdkeras.common.log`
(it reads the rank of a Horovod already imported, without importing TensorFlow) and the build's smoke
check, a program of its own. Only Horovod's plain TensorFlow ops
(``allreduce``, ``broadcast``, ``broadcast_object``) are used here, never its Keras
layer, so this module works unchanged on any Keras version Horovod's ops run on.

Process setup done by :func:`init`, in this order:

0. SIGTERM noted from now on (:func:`hvdkeras.common.signals.install_process_flag`): until a fit's
   preemption callback takes the flag over, a SIGTERM ends the rank as a preemption with nothing
   to save (status 75 and one line), and a fit still sees one that came before it. The launcher
   going away (its end of the rank's output closing) is a SIGTERM too; the rank's output then
   continues in :meth:`hvdkeras.common.workdir.Workdir.after_launcher`.
1. ``hvd.init()``.
2. GPU pinning: a process sees only the GPU at index ``local_rank`` of the host's
   GPU list, with memory growth on. The list is passed in (``gpus=``), so the rule
   is exercised on CPU-only machines with stand-in devices.
3. Thread budget on the host's cores (:func:`hvdkeras.common.horovod_env.thread_budget`),
   so ranks on one host do not oversubscribe them, and on CPU hosts each rank bound to its
   own block of those cores (:func:`hvdkeras.common.horovod_env.cpu_binding`; every thread of the
   process, Horovod's included, and every thread started later).
4. Seeds: Python, NumPy and TensorFlow seeded with ``runtime.seed + rank`` (initial
   weights still agree because they are broadcast from rank 0).
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import os
import random
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np
import numpy.typing as npt
import tensorflow as tf

from hvdkeras.common import horovod_env, log, signals
from hvdkeras.common.errors import HorovodNotLoadedError, PreflightError
from hvdkeras.common.horovod_env import (
    CpuBinding,
    ThreadBudget,
    allowed_cpus,
    apply_environment,
    cpu_binding,
    horovod_environment,
    resolve_horovod,
    select_local_gpu,
    shared_cpus,
    thread_budget,
)
from hvdkeras.common.workdir import Workdir
from hvdkeras.config import HorovodConfig, RuntimeConfig
from hvdkeras.runtime import compat
from hvdkeras.runtime import rendezvous as rendezvous_auth
from hvdkeras.runtime.tensorflow_import import set_thread_budget

try:
    import horovod.tensorflow as hvd
except (ImportError, tf.errors.NotFoundError) as _failed:  # the ops' library: missing, or for another TensorFlow
    _line = horovod_env.horovod_load_failure(_failed, tf.__version__)
    if _line is None:
        raise
    raise HorovodNotLoadedError(_line) from _failed

__all__ = ["ROOT_RANK", "ProcessInfo", "init", "init_horovod", "rank", "size", "local_rank", "local_size", "is_chief",
           "pin_local_gpu", "bind_cpus", "launch_cores", "reinit", "set_thread_budget", "set_seeds", "allreduce_sum",
           "allreduce_max",
           "broadcast_array", "allgather_array", "any_rank", "root_decides", "allgather_object", "agree_min",
           "preflight", "broadcast_object", "broadcast_variables", "fingerprint", "ranks_disagreeing"]

ROOT_RANK = 0


# --------------------------------------------------------------------------- process state


def init_horovod() -> None:
    """``hvd.init()`` alone, without :func:`init`'s environment, pinning, threads and seeds: the Estimator API,
    whose session config pins and budgets each rank (:func:`hvdkeras.tf_estimator.session_config`)."""
    hvd.init()


def initialized() -> bool:
    """Whether Horovod is initialised in this process (by :func:`init` or :func:`init_horovod`)."""
    return bool(hvd.is_initialized())


def rank() -> int:
    """This process's Horovod rank."""
    return hvd.rank()


def size() -> int:
    """The number of Horovod ranks."""
    return hvd.size()


def local_rank() -> int:
    """This process's rank among the ranks on its host."""
    return hvd.local_rank()


def local_size() -> int:
    """The number of ranks on this host."""
    return hvd.local_size()


def spans_hosts() -> bool:
    """True on every rank when the ranks run on more than one host (``size > local_size``)."""
    return hvd.size() > hvd.local_size()


def is_chief() -> bool:
    """True on rank 0, the one process that writes files and prints."""
    return hvd.rank() == ROOT_RANK


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


def bind_cpus(cpus: Sequence[int]) -> None:
    """Runs every thread of this process, and every thread it starts later, on ``cpus`` only.

    The kernel's affinity is per thread: the calling thread's is inherited by the threads it starts,
    and the threads already running (Horovod's background thread, Gloo's, TensorFlow's pools if
    started) are set one by one.
    """
    wanted = set(cpus)
    os.sched_setaffinity(0, wanted)
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), wanted)
        except (ProcessLookupError, PermissionError):  # a thread that ended meanwhile
            pass


# The cores this process was given before hvdkeras bound it, and the setting: an elastic job binds again
# from them after its ranks change (:func:`reinit`).
_launch_cpus: Optional[Tuple[int, ...]] = None
_binding_setting: Optional[str] = None  # None: not bound by init (a GPU host, or no init yet)


def launch_cores() -> int:
    """How many cores this process was given at launch, before :func:`init` bound it to its block (the thread
    budget's input: :func:`hvdkeras.common.horovod_env.host_cores` before binding)."""
    return len(_launch_cpus) if _launch_cpus is not None else horovod_env.host_cores()


def _bind_local_rank(setting: str, launch_cpus: Tuple[int, ...]) -> CpuBinding:
    binding = cpu_binding(setting, launch_cpus, shared_cpus(), hvd.local_rank(), hvd.local_size())
    if binding.cpus or set(allowed_cpus()) != set(launch_cpus):  # bound, or bound before and no more
        bind_cpus(binding.cpus or launch_cpus)
    return binding


def set_seeds(seed: int) -> None:
    """Seeds Python's, NumPy's and TensorFlow's random generators with ``seed``."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    tf.random.set_seed(seed)


@dataclasses.dataclass(frozen=True)
class ProcessInfo:
    """What :func:`init` set up for this process: ranks, thread budget, GPU and CPU binding."""

    rank: int
    size: int
    local_rank: int
    local_size: int
    threads: ThreadBudget
    gpu: Optional[str]
    threads_applied: bool
    cpus: CpuBinding = CpuBinding((), "not decided")

    @property
    def is_chief(self) -> bool:
        """True on rank 0."""
        return self.rank == ROOT_RANK


def init(runtime: RuntimeConfig, gpus: Optional[Sequence[Any]] = None,
         horovod_cfg: Optional[HorovodConfig] = None, workdir: Optional[str] = None,
         gpu_index: Optional[int] = None) -> ProcessInfo:
    """Initialises Horovod and this process (see the module docstring).

    Args:
        runtime: The process setup (:class:`hvdkeras.config.RuntimeConfig`).
        gpus: The GPUs to choose from; defaults to the physical GPUs TensorFlow finds.
        horovod_cfg: A :class:`hvdkeras.config.HorovodConfig`: its knobs (resolved for this host by
            :func:`resolve_horovod`) reach Horovod through ``HOROVOD_*`` environment variables
            before ``hvd.init``, in one step (:func:`hvdkeras.common.horovod_env.apply_environment`):
            values an earlier job in this process set are replaced, a variable set by hand wins
            and is named in a warning line.
        workdir: Where relative timeline and autotune-log paths are placed.
        gpu_index: Which of ``gpus`` this process pins; default: its local rank. A scheduler that assigns each
            process its GPU (Spark, to a task) hides the others, and the process pins index 0.

    Returns:
        What was set up for this process.
    """
    rendezvous_auth.require_authenticated_rendezvous("this rank")  # first: an open rendezvous is refused, not joined
    if signals.process_flag() is None:  # the command line installs it before TensorFlow's import (train.py)
        signals.install_process_flag(Workdir(workdir).after_launcher() if workdir else None)
    if gpus is None:
        gpus = tf.config.list_physical_devices("GPU")
    if horovod_cfg is not None:
        if workdir and (horovod_cfg.timeline or horovod_cfg.autotune_log):
            os.makedirs(workdir, exist_ok=True)
        wanted = horovod_environment(resolve_horovod(horovod_cfg), workdir)
        for note in apply_environment(wanted, os.environ):  # a variable set by hand wins, and is named
            log.warning(note)
    hvd.init()
    reset_cycled_names()  # a job's collective names start afresh, as every rank's do
    global _launch_cpus, _binding_setting
    if _launch_cpus is None:
        _launch_cpus = allowed_cpus()
    gpu = pin_local_gpu(gpus, hvd.local_rank() if gpu_index is None else gpu_index,
                        memory_growth=runtime.gpu_memory_growth)
    budget = thread_budget(launch_cores(), hvd.local_size(), runtime.intra_op_threads, runtime.inter_op_threads)
    applied = set_thread_budget(budget) if gpu is None else False
    _binding_setting = runtime.cpu_binding if gpu is None else None
    binding = (_bind_local_rank(runtime.cpu_binding, _launch_cpus) if gpu is None
               else CpuBinding((), "a GPU host: the rank is pinned to its GPU"))
    set_seeds(runtime.seed + hvd.rank())
    return ProcessInfo(
        rank=hvd.rank(), size=hvd.size(), local_rank=hvd.local_rank(), local_size=hvd.local_size(),
        threads=budget, gpu=getattr(gpu, "name", None), threads_applied=applied, cpus=binding,
    )


def reinit() -> None:
    """Shuts Horovod down and initialises it again: how an elastic job re-forms its ring after a reset."""
    hvd.shutdown()
    hvd.init()
    reset_cycled_names()
    if _binding_setting is not None and _launch_cpus is not None:  # the ranks on this host may have changed:
        _bind_local_rank(_binding_setting, _launch_cpus)  # each binds to its new block


# --------------------------------------------------------------------------- collectives
# Every rank must call these in the same order with the same names.

_name_calls: Dict[str, "itertools.count[int]"] = {}


def cycled_name(base: str) -> str:
    """``base.0``, ``base.1``, ``base.0``, ...: the name for a collective repeated every batch.

    Horovod refuses a name while it is still finishing the last tensor of that name,
    which a one-number allreduce issued again right after its result arrived can hit
    (fast batches, or a fused response); alternating two names avoids it and keeps
    Horovod's response cache to two entries. Every rank draws the names in the same
    order; :func:`reset_cycled_names` starts over (all ranks at once: a re-formed ring).
    """
    return f"{base}.{next(_name_calls.setdefault(base, itertools.count())) % 2}"


def reset_cycled_names() -> None:
    _name_calls.clear()


def is_collective_failure(exc: BaseException) -> bool:
    """True for how a failed Horovod op reaches Python: Horovod's own error or a TensorFlow op error."""
    from horovod.common.exceptions import HorovodInternalError

    return isinstance(exc, (HorovodInternalError, tf.errors.OpError))


# What the message of a TensorFlow error raised by a failed Horovod op contains, one of:
# "Horovod" (Horovod's op types, e.g. ``HorovodAllreduce_...`` in its default node names, and its
# "Horovod has been shut down" status for ops queued after a failure); Gloo's transport, whose
# exceptions name their source file (``.../gloo/transport/tcp/pair.cc:589] Read error ...:
# Connection reset by peer``: the op in flight when a peer died gets that text alone); or a node
# hvdkeras named (``[[{{node hvdkeras.grad.6}}]]``), where Horovod's op type is not in the name.
_HOROVOD_OP_MARKERS = ("Horovod", "gloo/transport", "{{node hvdkeras.")


def is_horovod_op_failure(exc: BaseException) -> bool:
    """True when ``exc`` is a TensorFlow ``UnknownError`` raised by a failed Horovod op (see the markers above).

    Stricter than :func:`is_collective_failure`: elastic training resets on it and retries, so an
    error of the user's own code must not match (it would be retried for ever).
    """
    return isinstance(exc, tf.errors.UnknownError) and any(m in (exc.message or "") for m in _HOROVOD_OP_MARKERS)


def allreduce_sum(values: npt.ArrayLike, name: str) -> np.ndarray:
    """Element-wise sum over ranks of a float64 array (exact for counts below 2**53)."""
    tensor = tf.convert_to_tensor(np.asarray(values, dtype=np.float64))
    return hvd.allreduce(tensor, op=hvd.Sum, name=name).numpy()


def allreduce_max(values: npt.ArrayLike, name: str) -> np.ndarray:
    """Element-wise maximum over ranks of a float64 array."""
    tensor = tf.convert_to_tensor(np.asarray(values, dtype=np.float64))
    return hvd.allreduce(tensor, op=hvd.Max, name=name).numpy()


def broadcast_array(values: npt.ArrayLike, name: str, root_rank: int = ROOT_RANK) -> np.ndarray:
    """Rank ``root_rank``'s float64 array on every rank."""
    tensor = tf.convert_to_tensor(np.asarray(values, dtype=np.float64))
    return hvd.broadcast(tensor, root_rank=root_rank, name=name).numpy()


def allgather_array(values: npt.ArrayLike, name: str) -> np.ndarray:
    """Every rank's float64 vector (the same length on every rank), one row per rank in rank order."""
    tensor = tf.convert_to_tensor(np.asarray(values, dtype=np.float64).reshape(1, -1))
    return hvd.allgather(tensor, name=name).numpy()


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

