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

import os
from typing import Dict, List, Tuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow loads

from absl import flags

from hvdkeras import config as config_lib
from hvdkeras.common import command_line, log, workdir_guard
from hvdkeras.common.errors import CheckpointError
from hvdkeras.common.workdir import Workdir

# The command's own flags (hvdkeras.common.command_line): --config, --set and --workdir are hvdkeras.train's names too.
FLAGS = command_line.flag_values()
flags.DEFINE_string("config", None, "the YAML config the checkpoints were trained with", flag_values=FLAGS)
flags.DEFINE_string("workdir", None, "the run's folder (its checkpoints/ are evaluated)", flag_values=FLAGS)
flags.DEFINE_multi_string("set", [], "override one config field (as for training). Repeatable.", flag_values=FLAGS)
REQUIRED = ("config", "workdir")  # checked by main, in one line; the reference marks them


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
    trainer.position.resume(trainer.model)
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


def main(argv: List[str]) -> int:
    """Evaluates ``--workdir``'s latest intact checkpoint (the flags parsed into :data:`FLAGS`); returns 0. An error
    the user can fix is raised (:func:`run` says it in one line, exit status 2)."""
    if len(argv) > 1:
        command_line.fail(f"unexpected arguments {' '.join(argv[1:])}; overrides go through --set section.key=value")
    missing = [f"--{name}" for name in REQUIRED if not FLAGS[name].value]
    if missing:
        command_line.fail(f"{' and '.join(missing)} {'are' if len(missing) > 1 else 'is'} required, e.g. --config"
                          " configs/digits.yaml --workdir runs/digits")
    cfg = config_lib.load(FLAGS.config, FLAGS.set)
    if cfg.trainer.api != "keras":
        raise config_lib.ConfigError("python -m hvdkeras.evaluate evaluates the Keras path's checkpoints;"
                                     " trainer.api=estimator evaluates in its own train_and_evaluate")
    checkpoints = Workdir(FLAGS.workdir).checkpoints
    if not os.path.isdir(checkpoints):
        raise CheckpointError(f"{checkpoints} does not exist; pass the --workdir a training wrote")
    workdir_guard.check_same_training(FLAGS.workdir, cfg, training=False)
    from hvdkeras.runtime import tensorflow_import

    tensorflow_import.load()
    evaluate(cfg, FLAGS.workdir)
    return 0


def run() -> None:
    """``python -m hvdkeras.evaluate``: :func:`main` under :func:`hvdkeras.common.command_line.run`."""
    command_line.run(main, FLAGS, __doc__ or "")


if __name__ == "__main__":
    run()
