"""The recommended callback list for a plain ``model.fit``, in the order that makes it correct."""
from __future__ import annotations

from typing import List, Optional, Sequence, Union

from hvdkeras.callbacks.agreement import TerminateOnNaN
from hvdkeras.callbacks.backup_and_restore import BackupAndRestore
from hvdkeras.callbacks.broadcast import BroadcastGlobalVariablesCallback
from hvdkeras.callbacks.chief_only import ProgbarLogger, TensorBoard
from hvdkeras.callbacks.divergence import DivergenceGuard
from hvdkeras.callbacks.learning_rate import LearningRateScheduleCallback, LearningRateWarmupCallback
from hvdkeras.callbacks.metric_average import MetricAverageCallback
from hvdkeras.callbacks.metrics_logger import JsonlMetricsLogger
from hvdkeras.callbacks.model_statistics import AverageModelStatisticsCallback
from hvdkeras.callbacks.profiler import ProfileBatches
from hvdkeras.callbacks.throughput import ThroughputLogger
from hvdkeras.runtime import compat, distributed
from hvdkeras.runtime.compat import keras


def default_callbacks(
    initial_lr: Optional[float] = None,
    warmup_epochs: float = 5,
    lr_schedule=None,
    staircase: bool = False,
    momentum_correction: bool = True,
    steps_per_epoch: Optional[int] = None,
    initial_batch: int = 0,
    backup: Union[str, BackupAndRestore, None] = None,
    metrics_file: Optional[str] = None,
    tensorboard_dir: Optional[str] = None,
    progress: bool = True,
    terminate_on_nan: bool = True,
    throughput_unit: str = "examples",
    root_rank: int = distributed.ROOT_RANK,
    size: Optional[int] = None,
    warmup_start_lr: Optional[float] = None,
    profile_dir: Optional[str] = None,
    profile_batches: Optional[Sequence[int]] = None,
    check_divergence: bool = True,
) -> List[keras.callbacks.Callback]:
    """Builds the recommended callback list for ``model.fit``, in the order that makes it correct.

    The list holds, in this order (each only if asked for):

    1. ``BroadcastGlobalVariablesCallback``: the same start on every rank.
    2. ``DivergenceGuard`` (``check_divergence``): at every epoch end, weights that differ
       between ranks stop every rank, before anything after it logs or saves them.
    3. ``AverageModelStatisticsCallback``: batch-norm statistics agree.
    4. ``MetricAverageCallback``: everything after it reads global metrics.
    5. ``TerminateOnNaN``: a NaN on any rank stops all ranks at the same batch.
    6. ``LearningRateWarmupCallback(initial_lr, warmup_epochs)`` and, from ``warmup_epochs`` on,
       ``LearningRateScheduleCallback(initial_lr, lr_schedule)``.
    7. ``ThroughputLogger``: examples per second in the logs.
    8. Rank 0 only: ``ProgbarLogger``, ``TensorBoard(tensorboard_dir)``,
       ``ProfileBatches(profile_dir, profile_batches)``, ``JsonlMetricsLogger(metrics_file)``.
    9. ``BackupAndRestore(backup)``: resume on every rank.

    This docstring is the one description of the order; the trainer uses this list.
    Pass ``verbose=1`` (or 2) to ``fit`` on every rank: only rank 0 prints.

    Args:
        initial_lr: The scaled learning rate. ``None``: no learning-rate callbacks.
        warmup_epochs: Epochs of ``LearningRateWarmupCallback`` (none if 0), after which
            ``LearningRateScheduleCallback`` takes over.
        lr_schedule: A multiplier of ``initial_lr``: a number, a function of the epoch, or a
            Keras ``LearningRateSchedule``. ``None``: 1.0. Needs ``initial_lr``.
        staircase: Passed to ``LearningRateScheduleCallback``: the rate changes at epoch
            starts only, instead of every batch.
        momentum_correction: Passed to both learning-rate callbacks.
        steps_per_epoch: Passed to both learning-rate callbacks (``None``: ``fit``'s steps).
        initial_batch: The first epoch of the coming ``fit`` starts at that batch (a run
            resumed mid-epoch); the learning-rate callbacks count from it.
        backup: A directory for a new ``BackupAndRestore``, or your own instance.
        metrics_file: Path of ``JsonlMetricsLogger``'s file.
        tensorboard_dir: Log directory of ``TensorBoard``.
        progress: Adds ``ProgbarLogger``.
        terminate_on_nan: Adds ``TerminateOnNaN``.
        throughput_unit: The unit ``ThroughputLogger`` counts (``<unit>_per_sec``).
        root_rank: The rank ``BroadcastGlobalVariablesCallback`` broadcasts from.
        size: The number of ranks for the warmup's default start (``None``: the number of ranks).
        warmup_start_lr: The rate the warmup starts at; the default is Horovod's
            ``initial_lr / size``.
        profile_dir: Where ``ProfileBatches`` writes (default ``tensorboard_dir``, else ``"profile"``).
        profile_batches: ``(start, stop)`` training batches to profile on rank 0.
        check_divergence: ``False`` turns the comparison of the ranks' weights off: no guard, and
            the ``BackupAndRestore`` this function makes does not compare before it saves (your
            own instance keeps its own setting).

    Returns:
        The callbacks, to pass to ``model.fit`` on every rank.

    Raises:
        ValueError: ``lr_schedule`` without ``initial_lr``.
    """
    callbacks: List[keras.callbacks.Callback] = [BroadcastGlobalVariablesCallback(root_rank=root_rank,
                                                                                  check_divergence=False)]
    if check_divergence:
        callbacks.append(DivergenceGuard())
    callbacks += [AverageModelStatisticsCallback(), MetricAverageCallback()]
    if terminate_on_nan:
        callbacks.append(TerminateOnNaN())
    if initial_lr is not None:
        if warmup_epochs > 0:
            callbacks.append(LearningRateWarmupCallback(initial_lr, warmup_epochs=warmup_epochs,
                                                        momentum_correction=momentum_correction,
                                                        steps_per_epoch=steps_per_epoch, size=size,
                                                        initial_batch=initial_batch, start_lr=warmup_start_lr))
        callbacks.append(LearningRateScheduleCallback(initial_lr, 1.0 if lr_schedule is None else lr_schedule,
                                                      start_epoch=warmup_epochs, staircase=staircase,
                                                      momentum_correction=momentum_correction,
                                                      steps_per_epoch=steps_per_epoch,
                                                      initial_batch=initial_batch))
    elif lr_schedule is not None:
        raise ValueError("lr_schedule needs initial_lr (the scaled learning rate it multiplies)")
    callbacks.append(ThroughputLogger(unit=throughput_unit))
    if progress:
        callbacks.append(ProgbarLogger(**compat.progbar_steps_kwargs()))
    if tensorboard_dir:
        callbacks.append(TensorBoard(log_dir=tensorboard_dir))
    if profile_batches:
        callbacks.append(ProfileBatches(profile_dir or tensorboard_dir or "profile", profile_batches))
    if metrics_file:
        callbacks.append(JsonlMetricsLogger(metrics_file))
    if backup is not None:
        callbacks.append(backup if isinstance(backup, BackupAndRestore)
                         else BackupAndRestore(backup, check_divergence=check_divergence))
    return callbacks
