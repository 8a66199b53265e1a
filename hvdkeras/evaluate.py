"""Command line: ``python -m hvdkeras.evaluate --config FILE --workdir DIR [--set a.b=value ...]``.

Evaluates the latest intact checkpoint of ``DIR`` on the config's validation data, on
as many ranks as the launcher starts (``horovodrun -np 2 -H localhost:2 --gloo python -m
hvdkeras.evaluate ...``): rank 0 loads the checkpoint and sends it to every rank, each rank
evaluates its part of the validation data, and the metrics are summed over the ranks, so
every validation example counts once, as in training's final line. Prints one line on
rank 0, ``evaluated <checkpoint> (N ranks, every example once): val_<metric>=...``.

The config must train what the checkpoint holds (the same check as a resume,
:mod:`hvdkeras.common.workdir_guard`); the number of ranks may differ from training's. Nothing
is written. Every error a user can fix is one line on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Dict, List, Optional, Tuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow loads

from hvdkeras import config as config_lib
from hvdkeras.common import log, workdir_guard
from hvdkeras.common.errors import CheckpointError, HvdkerasError
from hvdkeras.common.workdir import Workdir


def evaluate(config: config_lib.Config, workdir: str) -> Tuple[Dict[str, float], str]:
    """Collective: (the validation metrics of ``workdir``'s latest intact checkpoint over every rank's part,
    that checkpoint's folder). Imports TensorFlow and Horovod."""
    from hvdkeras.runtime import distributed
    from hvdkeras.training.assembly import ranks_text
    from hvdkeras.training.trainer import Trainer

    trainer = Trainer.from_config(config, workdir)
    if trainer.position.store is None:
        raise CheckpointError("checkpoint.enabled is false in the config, so there are no checkpoints to evaluate;"
                              " leave it at true")
    trainer.position.restore(trainer.model)
    found = trainer.position.restored
    if found is None:
        raise CheckpointError(f"no intact checkpoint in {Workdir(workdir).checkpoints}; train first with"
                              " python -m hvdkeras.train and the same --config and --workdir")
    if trainer.data.validation is None:
        raise CheckpointError(f"{config.data.name} has no validation data to evaluate on (data.eval_split)")
    metrics = trainer.evaluate()
    size = distributed.size()
    shown = ", ".join(f"{k}={v:.4f}" for k, v in sorted(metrics.items()))
    log.info(f"evaluated {found.path} ({ranks_text(size)}, every example once): {shown}")
    return metrics, found.path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m hvdkeras.evaluate", description=__doc__.split("\n\n")[1])
    parser.add_argument("--config", required=True, help="the YAML config the checkpoints were trained with")
    parser.add_argument("--workdir", required=True, help="the run's folder (its checkpoints/ are evaluated)")
    parser.add_argument("--set", action="append", default=[], metavar="section.key=value",
                        help="override one config field (as for training). Repeatable.")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Evaluates ``--workdir``'s latest intact checkpoint; returns the exit status (0, or 2 on a user error)."""
    args = _parser().parse_args(argv)
    try:
        cfg = config_lib.load(args.config, args.set)
        if cfg.trainer.api != "keras":
            raise config_lib.ConfigError("python -m hvdkeras.evaluate evaluates the Keras path's checkpoints;"
                                         " trainer.api=estimator evaluates in its own train_and_evaluate")
        checkpoints = Workdir(args.workdir).checkpoints
        if not os.path.isdir(checkpoints):
            raise CheckpointError(f"{checkpoints} does not exist; pass the --workdir a training wrote")
        workdir_guard.check_same_training(args.workdir, cfg, training=False)
        from hvdkeras.runtime import tensorflow_import

        tensorflow_import.load()
        evaluate(cfg, args.workdir)
    except HvdkerasError as exc:
        log.command_error(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
