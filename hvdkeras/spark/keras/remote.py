"""What each rank of a Spark estimator's ``fit`` runs: the config trainer's core on a :class:`SparkTask`.

:func:`train` is pickled to the Spark tasks by :func:`hvdkeras.spark.run`. It starts the
process and assembles the run with :meth:`hvdkeras.training.trainer.Trainer.from_config`,
like ``python -m hvdkeras.train``. Its workdir is the store's ``runs/<run_id>``, so rank 0's
atomic checkpoints land there and a second ``fit`` with the same ``run_id`` resumes.
Rank 0 returns the history and the trained model. A rank whose setup is refused
returns the one line instead of raising, for the driver to raise.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Mapping, Optional

from hvdkeras.common.errors import HvdkerasError
from hvdkeras.spark.keras.task import SparkTaskSpec

# metrics.jsonl's own fields, which Keras' History does not have
NOT_KERAS = ("epoch", "epoch_time_s", "examples_per_sec", "examples_per_sec_per_rank", "step_time_s", "train_time_s",
             "peak_rss_mb", "cpu_cores_per_rank")


def history_from(metrics_path: str) -> Dict[str, List[float]]:
    """Keras' ``History.history`` of the run, from its ``metrics.jsonl`` (every epoch, over resumed fits too)."""
    history: Dict[str, List[float]] = {}
    if not os.path.exists(metrics_path):
        return history
    with open(metrics_path) as f:
        for line in f:
            record = json.loads(line)
            for key, value in record.items():
                if key not in NOT_KERAS and isinstance(value, (int, float)):
                    history.setdefault(key, []).append(float(value))
    return history


def train(config_tree: Mapping[str, Any], spec: SparkTaskSpec, workdir: str) -> Optional[Dict[str, Any]]:
    """One rank's training; rank 0's ``{"history", "model", "size", "final"}``, other ranks' ``None``.

    Args:
        config_tree: the job's config as a dict (:func:`hvdkeras.config.from_dict`).
        spec: the data, model and compile arguments.
        workdir: the run's folder (the store's ``runs/<run_id>``).

    Returns:
        Rank 0's results (the model as ``.keras`` bytes); ``{"error": line}`` when setup was refused.
    """
    from hvdkeras import config as config_lib
    from hvdkeras.runtime import distributed
    from hvdkeras.spark.common import gpus
    from hvdkeras.spark.keras.task import SparkTask, model_to_bytes
    from hvdkeras.training.trainer import Trainer

    gpu_index = gpus.choose(spec.use_gpu, gpus.assigned() if spec.use_gpu else [], os.environ)
    best = _place_checkpoint_callback(spec.checkpoint_callback, workdir)
    try:
        config = config_lib.from_dict(config_tree, source="the estimator's parameters")
        trainer = Trainer.from_config(config, workdir, task=SparkTask(spec), gpus=None if spec.use_gpu else [],
                                      gpu_index=gpu_index)
        final = trainer.fit()
    except HvdkerasError as exc:
        return {"error": str(exc).splitlines()[0]}
    if not distributed.is_chief():
        return None
    if best is not None and os.path.exists(best):
        _load_saved(trainer.model, best, spec.checkpoint_callback)
    return {"history": history_from(trainer.parts.files.metrics), "model": model_to_bytes(trainer.model),
            "size": trainer.process.size, "final": final}


def _place_checkpoint_callback(callback: Any, workdir: str) -> Optional[str]:
    """Where Horovod's ``checkpoint_callback`` saves: its own ``filepath`` when it has one, else
    ``<workdir>/checkpoint_callback/model.keras`` (``model.weights.h5`` with ``save_weights_only``); None without
    one. Its file is what :func:`train` returns, as Horovod's estimator does."""
    if callback is None:
        return None
    if not getattr(callback, "filepath", None):
        name = "model.weights.h5" if getattr(callback, "save_weights_only", False) else "model.keras"
        callback.filepath = os.path.join(workdir, "checkpoint_callback", name)
    return str(callback.filepath)


def _load_saved(model: Any, path: str, callback: Any) -> None:
    """Puts the weights ``callback`` saved at ``path`` into ``model``."""
    if getattr(callback, "save_weights_only", False):
        model.load_weights(path)
        return
    from hvdkeras.runtime.compat import keras

    model.set_weights(keras.models.load_model(path, compile=False).get_weights())
