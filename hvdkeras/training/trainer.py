"""``Trainer``: the config-driven data-parallel training loop over a run's parts.

:meth:`Trainer.from_config` starts this process and assembles the parts
(:func:`hvdkeras.training.assembly.start`, :func:`hvdkeras.training.assembly.assemble`: the Horovod
process, this rank's data, the model compiled at the scaled learning rate, the run's
position and its checkpoint callback); ``Trainer(parts)`` takes them as they are.
What a driver (:mod:`hvdkeras.training.drivers`) uses is here, once, and declared as
:class:`hvdkeras.training.drivers.loop.Loop`: the pre-flight check, :meth:`Trainer.fit_range`
(``model.fit`` with :func:`hvdkeras.callbacks.default_callbacks`, the same list a
``model.fit`` user gets, in the order documented there), the final global validation
and the check that all ranks hold identical weights. :meth:`Trainer.fit` hands the
trainer to the driver the config asks for: plain, or elastic with ``elastic.enabled``.

Files under the workdir (:mod:`hvdkeras.common.workdir`) are written by rank 0 only.
"""
from __future__ import annotations

import hashlib
from typing import Any, Callable, Dict, List, Optional, Sequence

import horovod
import tensorflow as tf

from hvdkeras import config as config_lib
from hvdkeras.callbacks import BackupAndRestore, default_callbacks
from hvdkeras.callbacks.metric_average import global_results
from hvdkeras.callbacks.position_tracker import PositionTracker
from hvdkeras.common import log, scaling, schedules
from hvdkeras.runtime import compat, distributed
from hvdkeras.runtime import export as export_lib
from hvdkeras.runtime.compat import keras
from hvdkeras.runtime.position import RunPosition
from hvdkeras.training import assembly, tasks
from hvdkeras.training import data as data_lib
from hvdkeras.training.drivers import driver_for


class Trainer:
    """Trains a run's parts on all Horovod ranks; call :meth:`fit` on every rank.

    Construction runs no collective and writes no file.

    Args:
        parts: what :func:`hvdkeras.training.assembly.assemble` built (or stand-ins).
    """

    def __init__(self, parts: assembly.Parts):
        self.parts = parts

    @classmethod
    def from_config(cls, config: config_lib.Config, workdir: str, gpus: Optional[Sequence[Any]] = None,
                    task: Optional[tasks.Task] = None, gpu_index: Optional[int] = None) -> "Trainer":
        """Initialises this process and assembles every part from ``config`` and ``task`` (default: the config's,
        :func:`hvdkeras.training.tasks.for_config`).

        ``gpus`` overrides the GPUs found on the host (tests pass stand-ins); ``gpu_index`` picks the one this
        process pins (default: its local rank). Except
        in elastic mode, where no collective may run before the state sync, the
        ranks agree here on the steps per epoch (a collective).
        """
        world = assembly.start(config, workdir, gpus, gpu_index)
        return cls(assembly.assemble(config, world, task, workdir=workdir, agree=not config.elastic.enabled))

    # ------------------------------------------------------------------ the parts, typed

    @property
    def config(self) -> config_lib.Config:
        """The resolved config (this host's choices made)."""
        return self.parts.config

    @property
    def workdir(self) -> Optional[str]:
        """The run's folder."""
        return self.parts.workdir

    @property
    def process(self) -> distributed.ProcessInfo:
        """This process in the world it started in."""
        return self.parts.process

    @property
    def data(self) -> data_lib.Datasets:
        """This rank's data for the world it started in."""
        return self.parts.data

    @property
    def model(self) -> Any:
        """The compiled model."""
        return self.parts.model

    @property
    def scaled_lr(self) -> float:
        """The learning rate for the starting world's global batch."""
        return self.parts.scaled_lr

    @property
    def position(self) -> RunPosition:
        """Where the run is and how it resumes."""
        return self.parts.position

    @property
    def backup(self) -> Optional[BackupAndRestore]:
        """The checkpoint callback (``None`` with ``checkpoint.enabled=false``)."""
        return self.parts.backup

    # ------------------------------------------------------------------ shared by the drivers

    def data_for_world(self, rank: int, size: int) -> data_lib.Datasets:
        """This rank's data for ``size`` ranks (:meth:`hvdkeras.training.assembly.JobConfig.for_world`), the steps
        agreed
        by all (a collective)."""
        return assembly.build_data(self.parts.job, rank, size, self.process.threads.intra_op, agree=True,
                                   task=self.parts.task)

    def callbacks(self, scaled_lr: float, steps_per_epoch: int, size: int) -> List[keras.callbacks.Callback]:
        """:func:`hvdkeras.callbacks.default_callbacks` for this config, the learning rate counted from the
        position's start (a resumed partial epoch starts at its batch)."""
        cfg = self.config
        return default_callbacks(
            initial_lr=scaled_lr,
            warmup_epochs=cfg.schedule.warmup_epochs,
            lr_schedule=schedules.multiplier_from_config(cfg.schedule, cfg.trainer.epochs),
            staircase=schedules.is_staircase(cfg.schedule),
            momentum_correction=cfg.schedule.momentum_correction,
            steps_per_epoch=steps_per_epoch,
            initial_batch=self.position.start[1],
            warmup_start_lr=scaling.warmup_start_lr(cfg.optimizer, scaled_lr),
            backup=self.backup,
            metrics_file=self.parts.files.metrics,
            tensorboard_dir=self.parts.files.tensorboard if cfg.trainer.tensorboard else None,
            profile_dir=self.parts.files.tensorboard, profile_batches=cfg.runtime.profile_batches or None,
            progress=cfg.trainer.verbose > 0,
            terminate_on_nan=cfg.trainer.terminate_on_nan,
            check_divergence=cfg.trainer.check_divergence,
            throughput_unit=self.parts.task.throughput_unit,
            size=size,
        )

    def job_lines(self, data: Optional[data_lib.Datasets] = None, size: Optional[int] = None) -> List[str]:
        """What this job resolved that is not a config key (:meth:`hvdkeras.training.assembly.Parts.job_lines`)."""
        return self.parts.job_lines(data, size)

    def write_config(self) -> None:
        """Rank 0 writes the resolved config to ``<workdir>/config.yaml``, each chosen value with its reason."""
        self.parts.write_config()

    def preflight(self, data: data_lib.Datasets, scaled_lr: Optional[float] = None) -> None:
        """Collective: stops every rank with a readable diff if ranks differ in config, model, steps or versions.

        Besides the requested config, the values each rank resolved for itself that the whole
        job must share are compared: the gradients' wire format and the learning rate
        (``scaled_lr``, default :attr:`scaled_lr`).
        """
        flat: Dict[str, Any] = {}

        def flatten(tree: Dict[str, Any], prefix: str = "") -> None:
            for key, value in tree.items():
                if isinstance(value, dict):
                    flatten(value, f"{prefix}{key}.")
                else:
                    flat[f"{prefix}{key}"] = value

        flatten(config_lib.to_dict(self.parts.job.requested))
        variables = [(v.name, tuple(v.shape), compat.dtype(v).name) for v in self.model.variables]
        fields = {
            "config": hashlib.sha256(config_lib.to_yaml(self.parts.job.requested).encode()).hexdigest()[:12],
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
                  extra_callbacks: Callable[[], List[Any]] = lambda: []) -> Dict[str, List[float]]:
        """Trains from batch ``batch`` of epoch index ``epoch`` to ``trainer.epochs``; the history of the epochs.

        The drivers' one way to train, from a position the driver took through
        :func:`hvdkeras.runtime.checkpointing.next_position` once (``batch`` below the epoch's steps). A partial
        epoch (a run preempted mid-epoch) is a ``fit`` of its own over that epoch's batches from ``batch`` on
        (the same shuffle, ``skip(batch)``), the learning-rate callbacks counting from
        ``batch``; whole epochs follow in one ``fit``, with validation as configured.
        Before each ``fit`` the run's position is set where it starts
        (:meth:`hvdkeras.runtime.position.RunPosition.continue_at`), and a
        :class:`hvdkeras.callbacks.position_tracker.PositionTracker` first in its callbacks moves it;
        ``extra_callbacks()`` adds callbacks to each ``fit`` (they read the position there).
        """
        cfg = self.config
        epochs, steps = cfg.trainer.epochs, data.steps_per_epoch
        if not 0 <= batch < steps:
            raise ValueError(f"fit_range starts at batch {batch} of an epoch of {steps} steps: take the position"
                             " through checkpointing.next_position first")
        segments = []  # (dataset, steps, first epoch, last epoch, batches skipped): one fit each
        if epoch < epochs and batch:
            segments.append((data.train(epoch, epoch + 1).skip(batch), steps - batch, epoch, epoch + 1, batch))
            epoch += 1
        if epoch < epochs:
            segments.append((data.train(epoch, epochs), steps, epoch, epochs, 0))
        validate = data.validation is not None and cfg.trainer.validation_freq > 0
        history: Dict[str, List[float]] = {}
        for dataset, n, first, last, skip in segments:
            self.position.continue_at(first, skip)  # weights are in place: restored, synced or trained
            # The tracker first: it alone moves the position, which every callback after it reads.
            callbacks = ([PositionTracker(self.position)] + self.callbacks(scaled_lr, steps, size)
                         + list(self.parts.task.callbacks(cfg)) + list(extra_callbacks()))
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
        log.info(f"final validation ({assembly.ranks_text(size)}, every example once): {shown or 'no validation data'}")
        if self.config.trainer.export and distributed.is_chief() and self.workdir is not None:
            written = export_lib.export(self.model, self.workdir)
            log.info(f"exported {written['keras']} and {written['saved_model']}")
        return final

    # ------------------------------------------------------------------ driving

    def fit(self) -> Dict[str, float]:
        """Trains to ``trainer.epochs`` (resuming if possible) with the driver the config asks for
        (:mod:`hvdkeras.training.drivers`: plain, or elastic); returns the final global metrics."""
        return driver_for(self.config)(self).fit()


def train_and_evaluate(config: config_lib.Config, workdir: str, **kwargs: Any) -> Dict[str, float]:
    """Library entry point: ``Trainer.from_config(config, workdir, **kwargs).fit()`` on every rank.

    Returns:
        The final global metrics (``val_<metric>`` over every validation example once).
    """
    return Trainer.from_config(config, workdir, **kwargs).fit()
