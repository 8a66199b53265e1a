"""The plain driver: a fixed world of ranks, from the latest checkpoint to ``trainer.epochs``.

Pre-flight check across ranks; resume (every rank restores the latest intact
checkpoint, :class:`hvdkeras.callbacks.BackupAndRestore`); the start-up lines; then
:meth:`hvdkeras.trainer.Trainer.fit_range` inside :func:`hvdkeras.peers.watching`, so
that a lost rank or a stall ends the job with one line; then the final validation.
"""
from __future__ import annotations

import time
from typing import Dict, Tuple

from hvdkeras import distributed, horovod_env, log, peers
from hvdkeras.errors import ConfigError


class PlainDriver:
    """Trains a :class:`hvdkeras.trainer.Trainer` on the world it was started with."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.config = trainer.config

    def resume_position(self) -> Tuple[int, int]:
        """Collective: ``(epochs done, batches done in the next)``, (0, 0) for a fresh run; every rank restores."""
        trainer = self.trainer
        backup = trainer.backup
        if backup is None:
            return 0, 0
        if not self.config.checkpoint.resume:
            found = distributed.broadcast_object(backup.store.latest() if distributed.is_chief() else None,
                                                 name="hvdkeras.existing_checkpoint")
            if found is not None:
                raise ConfigError(
                    f"{trainer.workdir} already holds checkpoints up to {found.describe()} and checkpoint.resume is"
                    " false; set checkpoint.resume=true to continue from them, or pass a new --workdir"
                )
        backup.restore(trainer.model)
        return backup.restored.position if backup.restored else (0, 0)

    def start_lines(self, start: int, batch: int) -> None:
        """Each rank's line (where it runs, where it starts), then rank 0's lines on the job."""
        trainer, cfg, p = self.trainer, self.config, self.trainer.process
        threads = f"{p.threads.intra_op} intra-op / {p.threads.inter_op} inter-op threads" + (
            " (auto)" if "runtime.intra_op_threads" in trainer.auto else "")
        device = p.gpu or (f"CPU, {threads}" + ("" if p.threads_applied else " (not applied: TF already started)")
                           + f", {p.cpus.describe()}")
        at = f" and batch {batch} of epoch {start + 1}" if batch else ""
        where = (f"resuming after epoch {start}{at} from {trainer.backup.backup_dir}" if start or batch
                 else "starting fresh")
        log.info(f"rank {p.rank}/{p.size} (local {p.local_rank}/{p.local_size}, {device}): {where};"
                 f" epoch {start + 1} of {cfg.trainer.epochs}", every_rank=True)
        log.info(f"{cfg.data.name}, {cfg.optimizer.name}, workdir {trainer.workdir}; " + "; ".join(trainer.job_lines()))
        hv = cfg.horovod
        log.info("horovod: " + ", ".join(
            f"{key}={'Horovod default' if getattr(hv, key) is None else getattr(hv, key)}"
            + (" (auto)" if f"horovod.{key}" in trainer.auto else "")
            for key in ("compression", "cycle_time_ms", "fusion_threshold_mb", "groups")))
        advice = horovod_env.compression_advice(hv.compression, multi_host=p.size > p.local_size)
        if advice:
            log.info(f"note: {advice}")

    def fit(self) -> Dict[str, float]:
        trainer, cfg, p = self.trainer, self.config, self.trainer.process
        epochs = cfg.trainer.epochs
        trainer.write_config()
        trainer.preflight(trainer.data)
        start, batch = self.resume_position()
        self.start_lines(start, batch)
        final: Dict[str, float] = {}
        if start < epochs:
            tic = time.perf_counter()
            with peers.watching(p.rank, lambda mine: distributed.allgather_object(mine, name="hvdkeras.peers"),
                                distributed.is_collective_failure, backup=trainer.backup,
                                stall_shutdown_seconds=cfg.horovod.stall_shutdown_seconds):
                history = trainer.fit_range(trainer.data, start, batch, trainer.scaled_lr, p.size)
            log.info(f"trained epochs {start + 1}-{epochs} in {time.perf_counter() - tic:.1f}s")
            final = {k: float(v[-1]) for k, v in history.items()}
        else:
            log.info(f"nothing to train: the checkpoint already holds all {epochs} epochs")
        return trainer.finish(final)
