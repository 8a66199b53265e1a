"""``Trainer(config, workdir)``: the config-driven data-parallel training loop.

It composes the other modules; the callbacks are
:func:`hvdkeras.callbacks.default_callbacks` (the same list a ``model.fit`` user
gets), in this order::

    1. BroadcastGlobalVariablesCallback  same start on every rank
    2. AverageModelStatisticsCallback    batch-norm statistics agree before validation/saving
    3. MetricAverageCallback             every later callback reads global metrics
    4. TerminateOnNaN                    a NaN on any rank stops all at the same batch
    5. LearningRateWarmupCallback        per batch, scaled_lr / N -> scaled_lr
    6. LearningRateScheduleCallback      the decay after warmup
    7. ThroughputLogger                  images/s, step time
    rank 0 only:
    8. ProgbarLogger                     progress, with the global epoch metrics
    9. TensorBoard                       <workdir>/tensorboard (trainer.tensorboard: true): the global
                                         epoch metrics and what 5-7 put in the logs (lr, images_per_sec)
    10. JsonlMetricsLogger               <workdir>/metrics.jsonl
    11. BackupAndRestore                 <workdir>/checkpoints/epoch-NNNN (after the log line:
                                         a resume drops log lines past the checkpoint)

Files under ``workdir``, all written by rank 0 only: ``config.yaml`` (the resolved
config), ``metrics.jsonl``, ``checkpoints/``, and ``tensorboard/`` if switched on.
"""
from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Dict, List, Optional, Sequence

import tensorflow as tf

from hvdkeras import checkpointing, compat, distributed, optimizers, schedules
from hvdkeras import config as config_lib
from hvdkeras import data as data_lib
from hvdkeras import models as models_lib
from hvdkeras.callbacks import (BackupAndRestore, LearningRateScheduleCallback, LearningRateWarmupCallback,
                                default_callbacks)
from hvdkeras.callbacks.metric_average import global_results

keras = compat.keras

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
CHECKPOINT_DIR = "checkpoints"
TENSORBOARD_DIR = "tensorboard"


def _ranks(n: int) -> str:
    return f"{n} rank" if n == 1 else f"{n} ranks"


def make_loss(num_classes: int, label_smoothing: float = 0.0):
    """Cross-entropy on integer labels and softmax outputs, with optional label smoothing."""
    if not label_smoothing:
        return keras.losses.SparseCategoricalCrossentropy(name="loss")
    smoothed = keras.losses.CategoricalCrossentropy(label_smoothing=label_smoothing)

    def sparse_smoothed_crossentropy(y_true, y_pred):
        labels = tf.one_hot(tf.cast(tf.reshape(y_true, [-1]), tf.int32), num_classes)
        return smoothed(labels, y_pred)

    return sparse_smoothed_crossentropy


def callbacks_for(cfg: config_lib.Config, scaled_lr: float, steps_per_epoch: int, size: int, workdir: str,
                  backup: Optional[BackupAndRestore] = None) -> List[keras.callbacks.Callback]:
    """The trainer's callbacks for ``cfg`` (see the module docstring for the order)."""
    return default_callbacks(
        initial_lr=scaled_lr,
        warmup_epochs=cfg.schedule.warmup_epochs,
        lr_schedule=schedules.multiplier_from_config(cfg.schedule, cfg.trainer.epochs),
        staircase=cfg.schedule.name in ("constant", "step"),
        momentum_correction=cfg.schedule.momentum_correction,
        steps_per_epoch=steps_per_epoch,
        backup=backup,
        metrics_file=os.path.join(workdir, METRICS_FILE),
        tensorboard_dir=os.path.join(workdir, TENSORBOARD_DIR) if cfg.trainer.tensorboard else None,
        progress=cfg.trainer.verbose > 0,
        terminate_on_nan=cfg.trainer.terminate_on_nan,
        throughput_unit="images",
        size=size,
    )


class Trainer:
    """Trains ``config`` into ``workdir`` on all Horovod ranks; call :meth:`fit` on every rank.

    ``gpus`` overrides the GPUs found on the host (tests pass stand-ins).
    """

    def __init__(self, config: config_lib.Config, workdir: str, gpus: Optional[Sequence[Any]] = None):
        self.requested_config = config  # what every rank was asked to run (compared before training)
        self.workdir = workdir
        self.process = distributed.init(config.runtime, gpus=gpus, horovod_cfg=config.horovod, workdir=workdir)
        config_lib.validate_for_world(config, self.process.size)
        # The automatic choices made for this host, written down so the run can be repeated.
        config = dataclasses.replace(
            config,
            horovod=distributed.resolve_horovod(config.horovod, self.process.gpu is not None),
            runtime=dataclasses.replace(config.runtime, intra_op_threads=self.process.threads.intra_op,
                                        inter_op_threads=self.process.threads.inter_op))
        self.config = config
        self.is_chief = self.process.is_chief
        if self.is_chief:
            os.makedirs(workdir, exist_ok=True)
            config_lib.save(config, os.path.join(workdir, CONFIG_FILE))
        ckpt = config.checkpoint
        self.backup = BackupAndRestore(os.path.join(workdir, CHECKPOINT_DIR), delete_checkpoint=False, keep=ckpt.keep,
                                       every_epochs=ckpt.every_epochs) if ckpt.enabled else None

        cfg = config
        shard = data_lib.Shard(self.process.rank, self.process.size)
        self.data_config = cfg.data
        self.data = data_lib.build(cfg.data, shard, seed=cfg.runtime.seed, steps=cfg.trainer.steps_per_epoch,
                                   threads=self.process.threads.intra_op)
        if not cfg.elastic.enabled:  # elastic: no collective may run before the state sync (see _fit_elastic)
            self._agree_on_steps()
        compat.set_mixed_precision(cfg.runtime.mixed_precision)
        self.model = models_lib.build(self.data.input_shape, self.data.num_classes, cfg.model)
        self.optimizer, self.scaled_lr = optimizers.build(cfg.optimizer, cfg.horovod, self.process.size,
                                                          cfg.data.global_batch_size)
        self.model.compile(
            optimizer=self.optimizer,
            loss=make_loss(self.data.num_classes, cfg.trainer.label_smoothing),
            metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
            # Horovod's ops have no XLA kernels here: Keras 3's "auto" would compile the whole step on GPU
            # hosts. runtime.jit_compile compiles the forward and backward pass only (below).
            jit_compile=False,
        )
        # Under mixed_float16 the optimizer is a LossScaleOptimizer that unscales and checks the gradients
        # after the allreduce (Keras 2 wraps Horovod's optimizer in one; on Keras 3 gradient_exchange
        # distributes the loss-scale optimizer itself), so all ranks skip the same steps.
        if cfg.runtime.jit_compile:
            optimizers.use_xla_gradients(self.model)
        # Slots exist now, so a checkpoint restores the optimizer state immediately.
        compat.build_optimizer(self.model.optimizer, self.model.trainable_variables)

    # ------------------------------------------------------------------ helpers

    def _agree_on_steps(self) -> None:
        """Every rank must run the same number of steps, or the others wait in an allreduce for ever:
        the rule is the smallest count any rank can serve, agreed before training (collective)."""
        steps = distributed.agree_min(self.data.steps_per_epoch, name="hvdkeras.steps_per_epoch")
        if steps != self.data.steps_per_epoch:
            self.data = data_lib.build(self.data_config, data_lib.Shard(distributed.rank(), distributed.size()),
                                       seed=self.config.runtime.seed, steps=steps,
                                       threads=self.process.threads.intra_op)

    def log(self, message: str) -> None:
        """Prints on rank 0 only."""
        if self.is_chief:
            print(f"[hvdkeras] {message}", flush=True)

    def callbacks(self) -> List[keras.callbacks.Callback]:
        return callbacks_for(self.config, self.scaled_lr, self.data.steps_per_epoch, self.process.size,
                             self.workdir, self.backup)

    def preflight(self) -> None:
        """Collective: stops every rank with a readable diff if ranks differ in config, model, steps or versions."""
        import hashlib

        import horovod

        flat = {}

        def flatten(tree, prefix=""):
            for key, value in tree.items():
                if isinstance(value, dict):
                    flatten(value, f"{prefix}{key}.")
                else:
                    flat[f"{prefix}{key}"] = value

        flatten(config_lib.to_dict(self.requested_config))  # host-chosen values may differ by host
        variables = [(v.name, tuple(v.shape), compat.dtype(v).name) for v in self.model.variables]
        fields = {
            "config": hashlib.sha256(config_lib.to_yaml(self.requested_config).encode()).hexdigest()[:12],
            "model variables": hashlib.sha256(repr(variables).encode()).hexdigest()[:12] + f" ({len(variables)})",
            "steps per epoch": self.data.steps_per_epoch,
            "per-rank batch": self.data.per_rank_batch,
            "tensorflow": tf.__version__,
            "horovod": horovod.__version__,
        }
        distributed.preflight(fields, details={"config": flat})

    def resume_epoch(self) -> int:
        """Collective: the number of epochs already done (0 for a fresh run); rank 0 loads them."""
        if self.backup is None:
            return 0
        if not self.config.checkpoint.resume:
            store = self.backup.store
            found = distributed.broadcast_object(store.latest() if self.is_chief else None,
                                                 name="hvdkeras.existing_checkpoint")
            if found is not None:
                raise config_lib.ConfigError(
                    f"{self.workdir} already holds checkpoints up to epoch {found.epoch} and checkpoint.resume is"
                    " false; set checkpoint.resume=true to continue from them, or pass a new --workdir"
                )
        return self.backup.restore(self.model)

    def _fit_elastic(self) -> Dict[str, float]:
        """Trains under :func:`hvdkeras.elastic.run` (Horovod's ``hvd.elastic.run``); see :mod:`hvdkeras.elastic`.

        Workers that join later start this method while the others are mid-training, so
        every collective happens inside the elastic function, after the state sync: the
        checkpoint is loaded on rank 0 alone and reaches the others through that sync.
        """
        import horovod.tensorflow as hvd

        from hvdkeras import elastic
        from hvdkeras.elastic import CommitStateCallback, TrainingState

        cfg = self.config
        epochs = cfg.trainer.epochs
        initial_size = self.process.size
        start = 0
        if self.backup is not None and cfg.checkpoint.resume and self.is_chief:
            latest = self.backup.store.latest()
            if latest is not None:
                self.backup.store.restore(latest, checkpointing.trackable_for(self.model))
                start = latest.epoch
        state = TrainingState(self.model, epoch=start, batch=0)
        history: Dict[str, List[float]] = {}

        def run_fit(dataset, steps, first_epoch, last_epoch, batch_offset):
            if self.backup is not None:
                self.backup.continue_at(first_epoch)  # the weights come from the elastic state
            # The schedule counts in whole epochs of the current sharding, also in a partial epoch.
            callbacks = callbacks_for(cfg, self.scaled_lr, self.data.steps_per_epoch, hvd.size(), self.workdir,
                                      self.backup)
            for callback in callbacks:
                if isinstance(callback, (LearningRateWarmupCallback, LearningRateScheduleCallback)):
                    callback.batch_offset = batch_offset
            callbacks.append(CommitStateCallback(state, cfg.elastic.commit_every_batches, batch_offset))
            for key, values in self._run_fit(dataset, steps, first_epoch, last_epoch, callbacks).items():
                history.setdefault(key, []).extend(values)

        @elastic.run
        def train(state):
            size, rank = hvd.size(), hvd.rank()
            self.is_chief = rank == distributed.ROOT_RANK
            data_cfg = _elastic_data_config(cfg, initial_size, size)
            config_lib.validate_for_world(dataclasses.replace(cfg, data=data_cfg), size)
            self.data_config = data_cfg
            self.data = data_lib.build(data_cfg, data_lib.Shard(rank, size), seed=cfg.runtime.seed,
                                       steps=cfg.trainer.steps_per_epoch, threads=self.process.threads.intra_op)
            self._agree_on_steps()
            self.preflight()
            self.scaled_lr = optimizers.scaled_learning_rate(cfg.optimizer, size, data_cfg.global_batch_size)
            steps = self.data.steps_per_epoch
            epoch, batch = state.epoch, min(state.batch, self.data.steps_per_epoch)
            print(f"[hvdkeras] rank {rank}/{size}: elastic {'resuming' if epoch or batch else 'starting'} at"
                  f" epoch {epoch + 1}, batch {batch} (global batch {data_cfg.global_batch_size})", flush=True)
            if epoch < epochs and batch:  # the rest of the interrupted epoch
                run_fit(self.data.train(epoch, epoch + 1).skip(batch), steps - batch, epoch, epoch + 1, batch)
                epoch += 1
            if epoch < epochs:
                run_fit(self.data.train(epoch, epochs), steps, epoch, epochs, 0)

        train(state)
        return self._finish({k: float(v[-1]) for k, v in history.items()})

    def _run_fit(self, dataset, steps: int, first_epoch: int, last_epoch: int, callbacks) -> Dict[str, List[float]]:
        """``model.fit`` over epochs ``[first_epoch, last_epoch)`` with validation as configured; its history."""
        cfg = self.config
        validate = self.data.validation is not None and cfg.trainer.validation_freq > 0
        result = self.model.fit(dataset, steps_per_epoch=steps, epochs=last_epoch, initial_epoch=first_epoch,
                                validation_data=self.data.validation if validate else None,
                                validation_freq=cfg.trainer.validation_freq if validate else 1,
                                callbacks=callbacks, verbose=cfg.trainer.verbose if distributed.is_chief() else 0)
        return result.history

    def _finish(self, final: Dict[str, float]) -> Dict[str, float]:
        """Collective: validates if the last epoch did not, checks the ranks agree, prints once."""
        if not any(k.startswith("val_") for k in final):
            final.update(self.evaluate())
        size = distributed.size()
        if self.config.trainer.check_weights_agree:
            bad = distributed.ranks_disagreeing([v.numpy() for v in self.model.variables], name="hvdkeras.weights")
            if bad:
                raise RuntimeError(f"model weights differ from rank 0's on {bad} of {size} ranks after training")
        shown = ", ".join(f"{k}={v:.4f}" for k, v in sorted(final.items()) if k.startswith("val_"))
        self.log(f"final validation ({_ranks(size)}, every example once): {shown or 'no validation data'}")
        return final

    def evaluate(self) -> Dict[str, float]:
        """Validation metrics over every validation example of every rank (collective)."""
        if self.data.validation is None:
            return {}
        self.model.evaluate(self.data.validation, verbose=0)
        return {f"val_{k}": v for k, v in global_results(self.model.metrics, name="hvdkeras.evaluate").items()}

    # ------------------------------------------------------------------ main entry

    def fit(self) -> Dict[str, float]:
        """Trains to ``trainer.epochs`` (resuming if possible); returns the final global metrics."""
        cfg = self.config
        epochs = cfg.trainer.epochs
        p = self.process
        if cfg.elastic.enabled:
            return self._fit_elastic()
        self.preflight()
        start = self.resume_epoch()
        threads = f"{p.threads.intra_op} intra-op / {p.threads.inter_op} inter-op threads"
        device = p.gpu or f"CPU, {threads}" + ("" if p.threads_applied else " (not applied: TF already started)")
        where = f"resuming after epoch {start} from {self.backup.backup_dir}" if start else "starting fresh"
        print(f"[hvdkeras] rank {p.rank}/{p.size} (local {p.local_rank}/{p.local_size}, {device}): {where};"
              f" epoch {start + 1} of {epochs}", flush=True)
        self.log(f"{cfg.data.name}: global batch {cfg.data.global_batch_size} = {p.size} ranks x"
                 f" {self.data.per_rank_batch}, {self.data.steps_per_epoch} steps/epoch; {cfg.optimizer.name} at"
                 f" scaled lr {self.scaled_lr:g} ({cfg.optimizer.lr_scaling} rule); workdir {self.workdir}")

        final: Dict[str, float] = {}
        if start < epochs:
            tic = time.perf_counter()
            history = self._run_fit(self.data.train(start, epochs), self.data.steps_per_epoch, start, epochs,
                                    self.callbacks())
            self.log(f"trained epochs {start + 1}-{epochs} in {time.perf_counter() - tic:.1f}s")
            final = {k: float(v[-1]) for k, v in history.items()}
        else:
            self.log(f"nothing to train: the checkpoint already holds all {epochs} epochs")
        return self._finish(final)


def _elastic_data_config(cfg: config_lib.Config, initial_size: int, size: int) -> config_lib.DataConfig:
    """The data section for ``size`` ranks under ``elastic.on_resize`` (see :mod:`hvdkeras.elastic`)."""
    if cfg.elastic.on_resize == "keep_global_batch":
        return cfg.data
    per_rank = cfg.data.global_batch_size // initial_size
    eval_per_rank = (cfg.data.eval_global_batch_size or cfg.data.global_batch_size) // initial_size
    return dataclasses.replace(cfg.data, global_batch_size=per_rank * size,
                               eval_global_batch_size=eval_per_rank * size)


def train_and_evaluate(config: config_lib.Config, workdir: str, **kwargs) -> Dict[str, float]:
    """Library entry point: ``Trainer(config, workdir).fit()``."""
    return Trainer(config, workdir, **kwargs).fit()
