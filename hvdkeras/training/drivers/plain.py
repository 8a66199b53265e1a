"""The plain driver: a fixed world of ranks, from the latest checkpoint to ``trainer.epochs``.

Pre-flight check across ranks; resume (every rank restores the latest intact
checkpoint, :meth:`hvdkeras.runtime.position.RunPosition.restore`); the start-up lines; then
:meth:`hvdkeras.training.trainer.Trainer.fit_range` inside :func:`hvdkeras.common.peers.watching`, so
that a lost rank or a stall ends the job with one line; then the final validation.
"""
from __future__ import annotations

import time
from typing import Dict, Tuple

from hvdkeras.common import horovod_env, log, peers, signals
from hvdkeras.common.errors import ConfigError, PeerLostError, PeerUnresponsiveError, StallError
from hvdkeras.runtime import checkpointing, distributed
from hvdkeras.training.drivers.loop import Loop


class PlainDriver:
    """Trains a trainer's model on the world it was started with.

    Args:
        trainer: what it drives (a :class:`hvdkeras.training.trainer.Trainer`).
    """

    def __init__(self, trainer: Loop):
        self.trainer = trainer
        self.parts = trainer.parts
        self.config = trainer.parts.config

    def resume_position(self) -> Tuple[int, int]:
        """Collective: ``(epochs done, batches done in the next)``, (0, 0) for a fresh run; every rank restores."""
        parts = self.parts
        position = parts.position
        if position.store is None:
            return 0, 0
        if not self.config.checkpoint.resume:
            found = position.existing()
            if found is not None:
                raise ConfigError(
                    f"{parts.workdir} already holds checkpoints up to {found.describe()} and checkpoint.resume is"
                    " false; set checkpoint.resume=true to continue from them, or pass a new --workdir"
                )
        return position.resume(parts.model)

    def start_lines(self, start: int, batch: int) -> None:
        """Each rank's line (where it runs, where it starts), then rank 0's lines on the job."""
        parts, cfg, p = self.parts, self.config, self.parts.process
        auto = parts.job.auto
        threads = f"{p.threads.intra_op} intra-op / {p.threads.inter_op} inter-op threads" + (
            " (auto)" if "runtime.intra_op_threads" in auto else "")
        device = p.gpu or (f"CPU, {threads}" + ("" if p.threads_applied else " (not applied: TF already started)")
                           + f", {p.cpus.describe()}")
        at = f" and batch {batch} of epoch {start + 1}" if batch else ""
        where = (f"resuming after epoch {start}{at} from {parts.position.store.directory}"
                 if (start or batch) and parts.position.store is not None else "starting fresh")
        log.info(f"rank {p.rank}/{p.size} (local {p.local_rank}/{p.local_size}, {device}): {where};"
                 f" epoch {start + 1} of {cfg.trainer.epochs}", every_rank=True)
        log.info(f"{cfg.data.name}, {cfg.optimizer.name}, workdir {parts.workdir}; " + "; ".join(parts.job_lines()))
        hv = cfg.horovod
        log.info("horovod: " + ", ".join(
            f"{key}={'Horovod default' if getattr(hv, key) is None else getattr(hv, key)}"
            + (" (auto)" if f"horovod.{key}" in auto else "")
            for key in ("compression", "cycle_time_ms", "fusion_threshold_mb", "groups")))
        advice = horovod_env.compression_advice(hv.compression, multi_host=p.size > p.local_size)
        if advice:
            log.info(f"note: {advice}")

    def fit(self) -> Dict[str, float]:
        """Trains from where the checkpoints say to the last epoch; the final global metrics."""
        trainer, parts, cfg, p = self.trainer, self.parts, self.config, self.parts.process
        epochs = cfg.trainer.epochs
        trainer.write_config()
        trainer.preflight(parts.data)
        # where training continues: a checkpoint at an epoch's last batch is the next epoch's start
        start, batch = checkpointing.next_position(*self.resume_position(), parts.data.steps_per_epoch)
        self.start_lines(start, batch)
        final: Dict[str, float] = {}
        if start < epochs:
            tic = time.perf_counter()
            # A failed collective with a SIGTERM pending: rank 0 saves its last whole batch alone first
            save_alone = parts.backup.save_alone if parts.backup is not None else (lambda: None)
            try:
                with peers.watching(p.rank, lambda mine: distributed.allgather_object(mine, name="hvdkeras.peers"),
                                    distributed.is_collective_failure, resume_point=parts.position.resume_point,
                                    stall_shutdown_seconds=cfg.horovod.stall_shutdown_seconds,
                                    on_failure=save_alone) as table:
                    if parts.backup is not None:  # after a preemption, the other ranks leave once rank 0 is gone
                        parts.backup.leave_after(table.wait_until_root_gone)
                    history = trainer.fit_range(parts.data, start, batch, parts.scaled_lr, p.size)
            except (PeerLostError, PeerUnresponsiveError, StallError) as exc:
                preempted = signals.preempted_instead(exc)  # a SIGTERM came first: leave as preempted
                if preempted is None:
                    raise
                log.stop(str(preempted))
                raise preempted from exc
            log.info(f"trained epochs {start + 1}-{epochs} in {time.perf_counter() - tic:.1f}s")
            final = {k: float(v[-1]) for k, v in history.items()}
        else:
            log.info(f"nothing to train: the checkpoint already holds all {epochs} epochs")
        return trainer.finish(final)
