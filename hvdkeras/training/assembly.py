"""One assembly of a run's parts from a config, the world and a task: every front door uses it.

:func:`start` initialises this process for a config (Horovod's settings, pinning,
threads, seeds: :func:`hvdkeras.runtime.distributed.init`) and returns the world;
:func:`assemble` resolves the config once (:class:`JobConfig`) and builds the
parts (:class:`Parts`): this rank's data, the model compiled with the distributed
optimizer at the scaled rate, the run's position and its checkpoint callback. The
config trainer, ``python -m hvdkeras.evaluate``, ``python -m hvdkeras.input_bench``
and the ``tf.estimator`` path are each :func:`start` then :func:`assemble`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

import tensorflow as tf

from hvdkeras import config as config_lib
from hvdkeras.callbacks import BackupAndRestore
from hvdkeras.common import horovod_env, scaling, stack
from hvdkeras.common.errors import ConfigError, SetupError
from hvdkeras.common.workdir import Workdir, save_config
from hvdkeras.runtime import checkpointing, compat, distributed
from hvdkeras.runtime.position import RunPosition
from hvdkeras.runtime.xla_gradients import use_xla_gradients
from hvdkeras.training import data as data_lib
from hvdkeras.training import optimizers, tasks


def ranks_text(n: int) -> str:
    """``"1 rank"`` or ``"n ranks"``, as the job's lines say it."""
    return f"{n} rank" if n == 1 else f"{n} ranks"


# --------------------------------------------------------------------------- the config, resolved once


def resolved_for_host(config: config_lib.Config, process: distributed.ProcessInfo) -> config_lib.Config:
    """``config`` with the automatic choices made for this host (written to config.yaml so a run can be repeated)."""
    return dataclasses.replace(
        config,
        horovod=horovod_env.resolve_horovod(config.horovod, multi_host=process.size > process.local_size),
        runtime=dataclasses.replace(config.runtime, intra_op_threads=process.threads.intra_op,
                                    inter_op_threads=process.threads.inter_op))


def auto_reasons(requested: config_lib.Config, resolved: config_lib.Config,
                 process: distributed.ProcessInfo) -> Dict[str, str]:
    """``{key: why}`` for the values :func:`resolved_for_host` chose
    (:func:`hvdkeras.common.horovod_env.auto_reasons`)."""
    return horovod_env.auto_reasons(requested.horovod, requested.runtime, resolved.horovod, process.threads,
                                    multi_host=process.size > process.local_size, cores=distributed.launch_cores(),
                                    ranks_on_host=process.local_size)


@dataclasses.dataclass(frozen=True)
class JobConfig:
    """The config of one job, resolved once.

    Attributes:
        requested: what every rank was asked to run (compared across ranks before training).
        resolved: ``requested`` with this host's choices (Horovod's knobs, threads), which may
            differ by host; what the parts are built from.
        auto: ``{key: why}`` for each value chosen for the user, marked ``(auto)`` in the start-up
            lines and config.yaml.
        initial_size: the number of ranks the job started with.
    """

    requested: config_lib.Config
    resolved: config_lib.Config
    auto: Dict[str, str]
    initial_size: int

    @classmethod
    def for_process(cls, config: config_lib.Config, process: distributed.ProcessInfo) -> "JobConfig":
        """``config`` resolved for this host and ``process``'s world."""
        resolved = resolved_for_host(config, process)
        return cls(requested=config, resolved=resolved, auto=auto_reasons(config, resolved, process),
                   initial_size=process.size)

    def data_config_for_world(self, size: int) -> config_lib.DataConfig:
        """The data section ``size`` ranks train with: the world's global batches written in.

        A world of another size than the initial one (elastic) follows ``elastic.on_resize``
        (:func:`hvdkeras.common.scaling.for_resized_world`).
        """
        cfg = self.resolved
        return scaling.for_resized_world(cfg.data, cfg.elastic.on_resize, self.initial_size, size)

    def for_world(self, size: int) -> config_lib.Config:
        """The resolved config as ``size`` ranks see it: [:meth:`data_config_for_world`] as its data section."""
        return dataclasses.replace(self.resolved, data=self.data_config_for_world(size))


# --------------------------------------------------------------------------- the parts


def build_data(job: JobConfig, rank: int, size: int, threads: Optional[int], agree: bool = True,
               task: Optional[tasks.Task] = None, steps: Optional[int] = None) -> data_lib.Datasets:
    """This rank's data for ``size`` ranks, from ``task`` (default: the config's,
    :func:`hvdkeras.training.tasks.for_config`), ``steps`` per epoch (default: ``trainer.steps_per_epoch``, else
    as many as the data holds).

    With ``agree`` (a collective), every rank runs the smallest number of steps any
    rank can serve, so no rank waits in an allreduce for one that ran out of data.
    """
    task = task or tasks.for_config(job.resolved)
    view = job.for_world(size)  # the task sees this world's global batches

    def build(steps: Optional[int]) -> data_lib.Datasets:
        return task.datasets(view, data_lib.Shard(rank, size), steps, threads)

    data = build(steps or job.resolved.trainer.steps_per_epoch)
    if agree:
        steps = distributed.agree_min(data.steps_per_epoch, name="hvdkeras.steps_per_epoch")
        if steps != data.steps_per_epoch:
            data = build(steps)
    return data


def compile_model(config: config_lib.Config, data: data_lib.Datasets, size: int,
                  task: Optional[tasks.Task] = None) -> Tuple[Any, float]:
    """(``task``'s model compiled with its loss and metrics and the distributed optimizer at the scaled rate,
    that rate); ``task`` defaults to the config's.

    ``runtime.mixed_precision`` is Keras' global dtype policy while the model and its optimizer
    are built, and the previous policy again afterwards: the model keeps it, the process does not.
    """
    task = task or tasks.for_config(config)
    with compat.mixed_precision(config.runtime.mixed_precision):
        model = task.model(config, data)
        global_batch = scaling.global_batch(config.data, size)
        own = task.optimizer(config, scaling.scaled_learning_rate(config.optimizer, config.data, global_batch))
        if own is None:
            optimizer, scaled_lr = optimizers.build(config.optimizer, config.horovod, config.data, global_batch)
        else:
            optimizer, scaled_lr = optimizers.distribute(own, config.horovod), compat.get_learning_rate(own)
        model.compile(
            optimizer=optimizer,
            loss=task.loss(config, data),
            metrics=task.metrics(config, data),
            loss_weights=task.loss_weights(config, data),
            # Your data's sample weights weigh the loss; the metrics count every example alike, which [] tells
            # Keras 2 (it warns at every validation otherwise).
            weighted_metrics=[] if data.element_spec is not None and len(data.element_spec) == 3 else None,
            # Horovod's ops have no XLA kernels here: Keras 3's "auto" would compile the whole step on GPU
            # hosts. runtime.jit_compile compiles the forward and backward pass only (below).
            jit_compile=False,
        )
    compat.count_examples_in_output_losses(model)  # val_<output>_loss over every example, on Keras 3 too
    # Under mixed_float16 the optimizer is a LossScaleOptimizer that unscales and checks the gradients
    # after the allreduce, so all ranks skip the same steps.
    if config.runtime.jit_compile:
        use_xla_gradients(model)
    # Slots exist now, so a checkpoint restores the optimizer state immediately.
    compat.build_optimizer(model.optimizer, model.trainable_variables)
    return model, scaled_lr


def make_position(config: config_lib.Config, workdir: Optional[str]) -> RunPosition:
    """The run's position, on ``<workdir>/checkpoints`` when ``checkpoint.enabled`` (else, or without a
    workdir, without a store)."""
    ckpt = config.checkpoint
    if not ckpt.enabled or workdir is None:
        return RunPosition()
    return RunPosition(checkpointing.CheckpointStore(Workdir(workdir).checkpoints, keep=ckpt.keep))


def make_backup(config: config_lib.Config, workdir: Optional[str],
                position: Optional[RunPosition] = None) -> Optional[BackupAndRestore]:
    """The checkpoint callback the checkpoint section asks for, on ``position``; ``None`` when disabled or
    without a workdir."""
    ckpt = config.checkpoint
    if not ckpt.enabled or workdir is None:
        return None
    return BackupAndRestore(Workdir(workdir).checkpoints, delete_checkpoint=False, keep=ckpt.keep,
                            every_epochs=ckpt.every_epochs, preemption=ckpt.preemption,
                            grace_s=ckpt.preemption_grace_s, on_save_error=ckpt.on_save_error,
                            check_divergence=config.trainer.check_divergence,
                            position=position or make_position(config, workdir))


@dataclasses.dataclass
class Parts:
    """A run's parts, as :func:`assemble` builds them.

    Attributes:
        job: the config, resolved once (:class:`JobConfig`); ``job.resolved`` is what was built.
        workdir: the run's folder (:mod:`hvdkeras.common.workdir`), written by rank 0 only; ``None`` for a
            job that writes nothing (no checkpoints).
        process: this process in the world (:func:`hvdkeras.runtime.distributed.init`'s).
        task: what is learned (:class:`hvdkeras.training.tasks.Task`).
        data: this rank's data for the world.
        model: the compiled model (``None`` when assembled without one, as for ``tf.estimator``).
        scaled_lr: the learning rate for the world's global batch.
        position: where the run is and how it resumes.
        backup: the checkpoint callback, on ``position`` (``None`` with ``checkpoint.enabled=false``).
    """

    job: JobConfig
    workdir: Optional[str]
    process: distributed.ProcessInfo
    task: tasks.Task
    data: data_lib.Datasets
    model: Any
    scaled_lr: float
    position: RunPosition
    backup: Optional[BackupAndRestore]

    @property
    def config(self) -> config_lib.Config:
        """The resolved config (:attr:`JobConfig.resolved`)."""
        return self.job.resolved

    @property
    def files(self) -> Workdir:
        """The run's file names."""
        if self.workdir is None:
            raise ValueError("these parts were assembled without a workdir: they have no files")
        return Workdir(self.workdir)

    def job_lines(self, data: Optional[data_lib.Datasets] = None, size: Optional[int] = None) -> List[str]:
        """What this job resolved that is not a config key: the global batch, the rate, the warmup, the steps."""
        cfg, data = self.job.requested, data or self.data
        size = size or self.process.size
        steps = ("trainer.steps_per_epoch" if cfg.trainer.steps_per_epoch
                 else "(auto) as many full global batches as the data holds, the same on every rank")
        lines = [f"global batch {data.per_rank_batch * size} = {ranks_text(size)} x {data.per_rank_batch}"
                 + (" (data.per_rank_batch_size)" if cfg.data.per_rank_batch_size else " (data.global_batch_size)"),
                 f"learning rate {scaling.formula(cfg.optimizer, cfg.data, size)}"
                 f" (optimizer.lr_scaling: {cfg.optimizer.lr_scaling})"]
        if cfg.schedule.warmup_epochs > 0:
            start = scaling.warmup_start_lr(cfg.optimizer, self.scaled_lr)
            lines.append(f"warmup over {cfg.schedule.warmup_epochs:g} epochs, per batch from {start:g} to"
                         f" {self.scaled_lr:g}" + (" (nothing to warm up: the global batch is not above the"
                                                   " reference batch)" if start >= self.scaled_lr else ""))
        lines.append(f"steps per epoch {data.steps_per_epoch}: {steps}")
        return lines

    def write_config(self) -> None:
        """Rank 0 writes the resolved config to ``<workdir>/config.yaml``, each chosen value with its reason."""
        if distributed.is_chief():
            footer = [f"Resolved for this job ({ranks_text(self.process.size)}), not config keys:"]
            footer += [f"  {line}" for line in self.job_lines()]
            footer.append(f"  {stack.current().line()}")  # what a resume must match besides the config's keys
            save_config(self.config, self.files.config, auto=self.job.auto, footer=footer)


def start(config: config_lib.Config, workdir: Optional[str] = None,
          gpus: Optional[Sequence[Any]] = None, gpu_index: Optional[int] = None) -> distributed.ProcessInfo:
    """Initialises this process for ``config`` and checks the config against the world.

    Args:
        config: the job's config (its ``runtime`` and ``horovod`` sections apply here).
        workdir: where relative timeline and autotune-log paths go.
        gpus: the GPUs to pin from (default: those TensorFlow finds; tests pass stand-ins).
        gpu_index: which of them this process pins (default: its local rank; :func:`distributed.init`).

    Returns:
        This process in the world.

    Raises:
        SetupError: the config asks for what this installation lacks (TensorBoard).
        ConfigError: the config does not fit the world (e.g. a batch the ranks do not divide).
    """
    if config.trainer.tensorboard and not compat.TENSORBOARD_INSTALLED:
        raise SetupError(f"trainer.tensorboard is true, but TensorFlow {tf.__version__} does not install the"
                         " tensorboard package: pip install tensorboard, or set trainer.tensorboard=false")
    process = distributed.init(config.runtime, gpus=gpus, horovod_cfg=config.horovod, workdir=workdir,
                               gpu_index=gpu_index)
    config_lib.validate_for_world(config, process.size)
    return process


def assemble(config: config_lib.Config, world: distributed.ProcessInfo, task: Optional[tasks.Task] = None, *,
             workdir: Optional[str], agree: bool = True, with_model: bool = True,
             with_checkpoints: bool = True) -> Parts:
    """A run's parts from ``config``, the ``world`` (:func:`start`'s) and ``task``.

    Args:
        config: the job's config, as every rank was asked to run it.
        world: this process in the world.
        task: what is learned (default: the config's, :func:`hvdkeras.training.tasks.for_config`).
        workdir: the run's folder; ``None``: a job that writes nothing (no checkpoint callback).
        agree: the ranks agree on the steps per epoch (a collective; not before an elastic state sync).
        with_model: build and compile the model (``False``: the parts have ``model=None``).
        with_checkpoints: build the run's position on its checkpoints and the checkpoint callback (``False``: a
            position without a store and no callback, for a front door that keeps its own, as ``tf.estimator``).

    Returns:
        The parts; building them writes no file.

    Raises:
        ConfigError: a name the data, model or optimizer builders do not know, located in the config.
    """
    job = JobConfig.for_process(config, world)
    resolved = job.resolved
    task = task or tasks.for_config(resolved)
    try:
        data = build_data(job, world.rank, world.size, world.threads.intra_op, agree=agree, task=task)
        if with_model:
            model, scaled_lr = compile_model(resolved, data, world.size, task)
        else:
            model = None
            scaled_lr = scaling.scaled_learning_rate(resolved.optimizer, resolved.data,
                                                     scaling.global_batch(resolved.data, world.size))
    except ConfigError as exc:
        raise config_lib.locate(config, exc) from None
    if not with_checkpoints:
        return Parts(job=job, workdir=workdir, process=world, task=task, data=data, model=model,
                     scaled_lr=scaled_lr, position=RunPosition(), backup=None)
    position = make_position(resolved, workdir)
    return Parts(job=job, workdir=workdir, process=world, task=task, data=data, model=model, scaled_lr=scaled_lr,
                 position=position, backup=make_backup(resolved, workdir, position))
