"""``Trainer``: the config-driven data-parallel training loop, composed of parts it can be handed.

:meth:`Trainer.from_config` builds the parts (Horovod process, this rank's data,
compiled model at the scaled learning rate, checkpoint callback);
``Trainer(config, workdir, process=..., data=..., model=..., scaled_lr=...)`` takes
them as they are. What a driver (:mod:`hvdkeras.drivers`) uses is here, once:
the pre-flight check, :meth:`Trainer.fit_range` (``model.fit`` with
:func:`hvdkeras.callbacks.default_callbacks`, the same list a ``model.fit`` user
gets, in the order documented there), the final global validation and the check
that all ranks hold identical weights. :meth:`Trainer.fit` hands the trainer to the
driver the config asks for: plain, or elastic with ``elastic.enabled``.

Files under ``workdir`` (:mod:`hvdkeras.workdir`) are written by rank 0 only.
"""
from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import horovod
import tensorflow as tf

from hvdkeras import (
    checkpointing,
    compat,
    distributed,
    drivers,
    horovod_env,
    log,
    optimizers,
    scaling,
    schedules,
    tasks,
)
from hvdkeras import config as config_lib
from hvdkeras import data as data_lib
from hvdkeras import export as export_lib
from hvdkeras.callbacks import BackupAndRestore, default_callbacks
from hvdkeras.callbacks.metric_average import global_results
from hvdkeras.compat import keras
from hvdkeras.errors import ConfigError, SetupError
from hvdkeras.workdir import Workdir, save_config
from hvdkeras.xla_gradients import use_xla_gradients


def _ranks(n: int) -> str:
    return f"{n} rank" if n == 1 else f"{n} ranks"


# --------------------------------------------------------------------------- building the parts


def resolved_for_host(config: config_lib.Config, process: distributed.ProcessInfo) -> config_lib.Config:
    """``config`` with the automatic choices made for this host (written to config.yaml so a run can be repeated)."""
    return dataclasses.replace(
        config,
        horovod=horovod_env.resolve_horovod(config.horovod, multi_host=process.size > process.local_size),
        runtime=dataclasses.replace(config.runtime, intra_op_threads=process.threads.intra_op,
                                    inter_op_threads=process.threads.inter_op))


def auto_reasons(requested: config_lib.Config, resolved: config_lib.Config,
                 process: distributed.ProcessInfo) -> Dict[str, str]:
    """``{key: why}`` for the values :func:`resolved_for_host` chose (:func:`hvdkeras.horovod_env.auto_reasons`)."""
    return horovod_env.auto_reasons(requested.horovod, requested.runtime, resolved.horovod, process.threads,
                                    multi_host=process.size > process.local_size, cores=distributed.launch_cores(),
                                    ranks_on_host=process.local_size)


def build_data(config: config_lib.Config, data_config: config_lib.DataConfig, rank: int, size: int,
               threads: Optional[int], agree: bool = True, task: Optional[tasks.Task] = None) -> data_lib.Datasets:
    """This rank's data for ``size`` ranks, from ``task`` (default: the config's, :func:`hvdkeras.tasks.for_config`).

    With ``agree`` (a collective), every rank runs the smallest number of steps any
    rank can serve, so no rank waits in an allreduce for one that ran out of data.
    """
    task = task or tasks.for_config(config)
    data_config = scaling.for_world(data_config, size)  # the task sees this world's global batches

    def build(steps):
        return task.datasets(config, data_config, data_lib.Shard(rank, size), config.runtime.seed, steps, threads)

    data = build(config.trainer.steps_per_epoch)
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
        optimizer, scaled_lr = optimizers.build(config.optimizer, config.horovod, config.data,
                                                scaling.global_batch(config.data, size))
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


def make_backup(config: config_lib.Config, workdir: str) -> Optional[BackupAndRestore]:
    ckpt = config.checkpoint
    if not ckpt.enabled:
        return None
    return BackupAndRestore(Workdir(workdir).checkpoints, delete_checkpoint=False, keep=ckpt.keep,
                            every_epochs=ckpt.every_epochs, preemption=ckpt.preemption,
                            grace_s=ckpt.preemption_grace_s, on_save_error=ckpt.on_save_error,
                            check_divergence=config.trainer.check_divergence)


# --------------------------------------------------------------------------- the trainer


class Trainer:
    """Trains ``config`` into ``workdir`` on all Horovod ranks; call :meth:`fit` on every rank.

    Construction runs no collective and writes no file. ``requested_config`` is what
    every rank was asked to run (compared across ranks before training; ``config``
    may hold host-chosen values that differ by host); it defaults to ``config``.
    """

    def __init__(self, config: config_lib.Config, workdir: str, *, process: distributed.ProcessInfo,
                 data: data_lib.Datasets, model, scaled_lr: float, backup: Optional[BackupAndRestore] = None,
                 requested_config: Optional[config_lib.Config] = None, task: Optional[tasks.Task] = None):
        self.config = config
        self.requested_config = requested_config or config
        # what was chosen for the user: {key: why}, marked (auto) in the start-up lines and config.yaml
        self.auto: Dict[str, str] = {}
        self.workdir = workdir
        self.files = Workdir(workdir)
        self.process = process
        self.data = data
        self.model = model
        self.scaled_lr = scaled_lr
        self.backup = backup
        self.task = task or tasks.for_config(config)

    @classmethod
    def from_config(cls, config: config_lib.Config, workdir: str, gpus: Optional[Sequence[Any]] = None,
                    task: Optional[tasks.Task] = None) -> "Trainer":
        """Initialises this process and builds every part from ``config`` and ``task`` (default: the config's,
        :func:`hvdkeras.tasks.for_config`).

        ``gpus`` overrides the GPUs found on the host (tests pass stand-ins). Except
        in elastic mode, where no collective may run before the state sync, the
        ranks agree here on the steps per epoch (a collective).
        """
        if config.trainer.tensorboard and not compat.TENSORBOARD_INSTALLED:
            raise SetupError(f"trainer.tensorboard is true, but TensorFlow {tf.__version__} does not install the"
                             " tensorboard package: pip install tensorboard, or set trainer.tensorboard=false")
        process = distributed.init(config.runtime, gpus=gpus, horovod_cfg=config.horovod, workdir=workdir)
        config_lib.validate_for_world(config, process.size)
        resolved = resolved_for_host(config, process)
        task = task or tasks.for_config(resolved)
        try:
            data = build_data(resolved, resolved.data, process.rank, process.size, process.threads.intra_op,
                              agree=not resolved.elastic.enabled, task=task)
            model, scaled_lr = compile_model(resolved, data, process.size, task)
        except ConfigError as exc:
            raise config_lib.locate(config, exc) from None
        trainer = cls(resolved, workdir, process=process, data=data, model=model, scaled_lr=scaled_lr,
                      backup=make_backup(resolved, workdir), requested_config=config, task=task)
        trainer.auto = auto_reasons(config, resolved, process)
        return trainer

    # ------------------------------------------------------------------ shared by the drivers

    def data_for_world(self, data_config: config_lib.DataConfig, rank: int, size: int) -> data_lib.Datasets:
        """This rank's data for ``size`` ranks, the steps agreed by all (a collective)."""
        return build_data(self.config, data_config, rank, size, self.process.threads.intra_op, agree=True,
                          task=self.task)

    def callbacks(self, scaled_lr: float, steps_per_epoch: int, size: int,
                  initial_batch: int = 0) -> List[keras.callbacks.Callback]:
        """:func:`hvdkeras.callbacks.default_callbacks` for this config; ``initial_batch``: the first
        epoch of the coming ``fit`` starts at that batch (a resumed partial epoch)."""
        cfg = self.config
        return default_callbacks(
            initial_lr=scaled_lr,
            warmup_epochs=cfg.schedule.warmup_epochs,
            lr_schedule=schedules.multiplier_from_config(cfg.schedule, cfg.trainer.epochs),
            staircase=cfg.schedule.name in ("constant", "step"),
            momentum_correction=cfg.schedule.momentum_correction,
            steps_per_epoch=steps_per_epoch,
            initial_batch=initial_batch,
            warmup_start_lr=scaling.warmup_start_lr(cfg.optimizer, scaled_lr),
            backup=self.backup,
            metrics_file=self.files.metrics,
            tensorboard_dir=self.files.tensorboard if cfg.trainer.tensorboard else None,
            profile_dir=self.files.tensorboard, profile_batches=cfg.runtime.profile_batches or None,
            progress=cfg.trainer.verbose > 0,
            terminate_on_nan=cfg.trainer.terminate_on_nan,
            check_divergence=cfg.trainer.check_divergence,
            throughput_unit=self.task.throughput_unit,
            size=size,
        )

    def job_lines(self, data: Optional[data_lib.Datasets] = None, size: Optional[int] = None) -> List[str]:
        """What this job resolved that is not a config key: the global batch, the rate, the warmup, the steps."""
        cfg, data = self.requested_config, data or self.data
        size = size or self.process.size
        steps = ("trainer.steps_per_epoch" if cfg.trainer.steps_per_epoch
                 else "(auto) as many full global batches as the data holds, the same on every rank")
        lines = [f"global batch {data.per_rank_batch * size} = {_ranks(size)} x {data.per_rank_batch}"
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
            footer = [f"Resolved for this job ({_ranks(self.process.size)}), not config keys:"]
            footer += [f"  {line}" for line in self.job_lines()]
            save_config(self.config, self.files.config, auto=self.auto, footer=footer)

    def preflight(self, data: data_lib.Datasets, scaled_lr: Optional[float] = None) -> None:
        """Collective: stops every rank with a readable diff if ranks differ in config, model, steps or versions.

        Besides the requested config, the values each rank resolved for itself that the whole
        job must share are compared: the gradients' wire format and the learning rate
        (``scaled_lr``, default :attr:`scaled_lr`).
        """
        flat: Dict[str, Any] = {}

        def flatten(tree, prefix=""):
            for key, value in tree.items():
                if isinstance(value, dict):
                    flatten(value, f"{prefix}{key}.")
                else:
                    flat[f"{prefix}{key}"] = value

        flatten(config_lib.to_dict(self.requested_config))
        variables = [(v.name, tuple(v.shape), compat.dtype(v).name) for v in self.model.variables]
        fields = {
            "config": hashlib.sha256(config_lib.to_yaml(self.requested_config).encode()).hexdigest()[:12],
            # resolved by each rank for itself; what the whole job must share (threads may differ by host)
            "gradient compression": self.config.horovod.compression,
            "learning rate": f"{self.scaled_lr if scaled_lr is None else scaled_lr:g}",
            "model variables": hashlib.sha256(repr(variables).encode()).hexdigest()[:12] + f" ({len(variables)})",
            "steps per epoch": data.steps_per_epoch,
            "per-rank batch": data.per_rank_batch,
            "tensorflow": tf.__version__,
            "horovod": horovod.__version__,
        }
        distributed.preflight(fields, details={"config": flat})

    def fit_range(self, data: data_lib.Datasets, epoch: int, batch: int, scaled_lr: float, size: int,
                  extra_callbacks: Callable[[int], List[Any]] = lambda initial_batch: []) -> Dict[str, List[float]]:
        """Trains from batch ``batch`` of epoch index ``epoch`` to ``trainer.epochs``; the history of the epochs.

        The drivers' one way to train. The position is first taken through
        :func:`hvdkeras.checkpointing.next_position`. A partial epoch (a run preempted
        mid-epoch) is a ``fit`` of its own over that epoch's batches from ``batch`` on
        (the same shuffle, ``skip(batch)``), the learning-rate callbacks counting from
        ``batch``; whole epochs follow in one ``fit``, with validation as configured.
        ``extra_callbacks(initial_batch)`` adds callbacks to each ``fit``.
        """
        cfg = self.config
        epochs, steps = cfg.trainer.epochs, data.steps_per_epoch
        epoch, batch = checkpointing.next_position(epoch, batch, steps)
        parts = []
        if epoch < epochs and batch:
            parts.append((data.train(epoch, epoch + 1).skip(batch), steps - batch, epoch, epoch + 1, batch))
            epoch += 1
        if epoch < epochs:
            parts.append((data.train(epoch, epochs), steps, epoch, epochs, 0))
        validate = data.validation is not None and cfg.trainer.validation_freq > 0
        history: Dict[str, List[float]] = {}
        for dataset, n, first, last, skip in parts:
            if self.backup is not None:
                self.backup.continue_at(first, skip)  # weights are in place: restored, synced or trained
            callbacks = self.callbacks(scaled_lr, steps, size, initial_batch=skip) + list(extra_callbacks(skip))
            # shuffle=False: the dataset shuffles itself, by the seed and the epoch (Keras 3 warns on True).
            result = self.model.fit(dataset, steps_per_epoch=n, epochs=last, initial_epoch=first, shuffle=False,
                                    validation_data=data.validation if validate else None,
                                    validation_freq=cfg.trainer.validation_freq if validate else 1,
                                    callbacks=callbacks, verbose=cfg.trainer.verbose if distributed.is_chief() else 0)
            for key, values in result.history.items():
                history.setdefault(key, []).extend(values)
        return history

    def evaluate(self, data: Optional[data_lib.Datasets] = None) -> Dict[str, float]:
        """Validation metrics over every validation example of every rank (collective)."""
        data = data or self.data
        if data.validation is None:
            return {}
        self.model.evaluate(data.validation, verbose=0)
        return {f"val_{k}": v for k, v in global_results(self.model.metrics, name="hvdkeras.evaluate").items()}

    def finish(self, final: Dict[str, float], data: Optional[data_lib.Datasets] = None) -> Dict[str, float]:
        """Collective: validates if the last epoch did not, checks the ranks agree, prints once."""
        if not any(k.startswith("val_") for k in final):
            final.update(self.evaluate(data))
        size = distributed.size()
        if self.config.trainer.check_weights_agree:
            bad = distributed.ranks_disagreeing([v.numpy() for v in self.model.variables], name="hvdkeras.weights")
            if bad:
                raise RuntimeError(f"model weights differ from rank 0's on {bad} of {size} ranks after training")
        shown = ", ".join(f"{k}={v:.4f}" for k, v in sorted(final.items()) if k.startswith("val_"))
        log.info(f"final validation ({_ranks(size)}, every example once): {shown or 'no validation data'}")
        if self.config.trainer.export and distributed.is_chief():
            written = export_lib.export(self.model, self.workdir)
            log.info(f"exported {written['keras']} and {written['saved_model']}")
        return final

    # ------------------------------------------------------------------ driving

    def fit(self) -> Dict[str, float]:
        """Trains to ``trainer.epochs`` (resuming if possible) with the driver the config asks for
        (:mod:`hvdkeras.drivers`: plain, or elastic); returns the final global metrics."""
        return drivers.for_config(self.config)(self).fit()


def train_and_evaluate(config: config_lib.Config, workdir: str, **kwargs) -> Dict[str, float]:
    """Library entry point: ``Trainer.from_config(config, workdir, **kwargs).fit()`` on every rank."""
    return Trainer.from_config(config, workdir, **kwargs).fit()
