"""What each rank of a Spark estimator's ``fit`` runs: the config trainer's core on a :class:`SparkTask`.

:func:`train` is pickled to the Spark tasks by :func:`hvdkeras.spark.run`. It starts the
process and assembles the run with :meth:`hvdkeras.training.trainer.Trainer.from_config`,
like ``python -m hvdkeras.train``. Each rank trains in a local folder of its own (a temporary
folder on the executor, removed at the end), never in the store, which may be an object store:
rank 0 first fetches the store's newest trusted checkpoint of ``runs/<run_id>`` into its folder,
so a second ``fit`` with the same ``run_id`` resumes, and :class:`PublishCheckpoints` publishes
each checkpoint it saves, with ``metrics.jsonl`` and ``config.yaml``
(:class:`hvdkeras.spark.common.publish.RunMirror`). Horovod's ``checkpoint_callback`` saves into the local
folder too; rank 0 publishes its file with its best score and fetches both back, so a fit that resumes (Spark's
retry, or your next ``fit``) still returns the best model of every epoch. Rank 0 returns the history and the trained
model, and where its time went (``seconds``: its process's start to here, which is the interpreter and the
imports, TensorFlow's among them; fetching the run; setting up; training; publishing). A rank whose setup is
refused returns the one line instead of raising, for the driver to raise.
"""
from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Mapping, Optional

from hvdkeras.common import log
from hvdkeras.common.errors import SetupError
from hvdkeras.common.workdir import read_metrics
from hvdkeras.runtime.compat import keras
from hvdkeras.spark.common.publish import BEST_DIR, RunMirror, local_folder
from hvdkeras.spark.keras.task import SparkTaskSpec

# metrics.jsonl's own fields, which Keras' History does not have
NOT_KERAS = ("epoch", "epoch_time_s", "examples_per_sec", "examples_per_sec_per_rank", "step_time_s", "train_time_s",
             "peak_rss_mb", "cpu_cores_per_rank")


def history_from(metrics_path: str) -> Dict[str, List[float]]:
    """Keras' ``History.history`` of the run, from its ``metrics.jsonl`` (every epoch, over resumed fits too; a line
    a crash tore is skipped, :func:`hvdkeras.common.workdir.read_metrics`)."""
    history: Dict[str, List[float]] = {}
    for record in read_metrics(metrics_path):
        for key, value in record.items():
            if key not in NOT_KERAS and isinstance(value, (int, float)) and not isinstance(value, bool):
                history.setdefault(key, []).append(float(value))
    return history


class PublishCheckpoints(keras.callbacks.Callback):
    """Rank 0's callback: after each epoch (the checkpoint callback, earlier in the list, has saved) and at the
    end of a ``fit``, the checkpoints the store does not hold yet go there (:meth:`RunMirror.publish`).

    A publish that fails is one warning line: the checkpoint stays in the local folder and the next
    publish tries again (:func:`train` publishes once more when training ends, however it ends).
    """

    def __init__(self, mirror: RunMirror):
        super().__init__()
        self.mirror = mirror

    def on_epoch_end(self, epoch: int, logs: Optional[Dict[str, Any]] = None) -> None:
        """Publishes what the epoch saved."""
        _publish(self.mirror, "the next epoch tries again")

    def on_train_end(self, logs: Optional[Dict[str, Any]] = None) -> None:
        """Publishes what the end of the ``fit`` saved."""
        _publish(self.mirror, "the end of training tries again")


def _publish(mirror: RunMirror, then: str) -> Optional[str]:
    """``mirror.publish()``; on failure one warning line, returned."""
    try:
        mirror.publish()
    except Exception as exc:  # noqa: BLE001  each filesystem raises its own kinds
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        line = f"cannot publish the run's checkpoints to {mirror.shown} ({first}); they are kept in {mirror.local}"
        log.warning(f"{line}; {then}")
        return line
    return None


def train(config_tree: Mapping[str, Any], spec: SparkTaskSpec, workdir: str) -> Optional[Dict[str, Any]]:
    """One rank's training in a local folder, rank 0 mirroring it to the store; what :func:`_train` returns.

    Rank 0 fetches the run's newest trusted checkpoint (with ``metrics.jsonl`` and ``config.yaml``) from the
    store first, publishes after each epoch, and once more when training ends, however it ends. The local
    folder is removed at the end (or, when the rank was killed, by the next fit on the host:
    :func:`hvdkeras.spark.common.publish.local_folder`).

    Args:
        config_tree: the job's config as a dict (:func:`hvdkeras.config.from_dict`).
        spec: the data, model and compile arguments.
        workdir: the run's folder in the store, as its filesystem names it (the store's ``runs/<run_id>``).

    Returns:
        :func:`_train`'s.

    Raises:
        SetupError: the store cannot be read, or the last publish failed (and :func:`_train`'s).
    """
    import dataclasses
    import shutil

    import psutil

    from hvdkeras import config as config_lib
    from hvdkeras.common import horovod_env

    entered = time.time()
    started = max(0.0, entered - psutil.Process().create_time())  # the interpreter and the imports, TF's among them
    local = local_folder()
    try:
        best = _place_checkpoint_callback(spec.checkpoint_callback, local)
        if horovod_env.launcher_rank() not in (0, None):
            return _train(config_tree, spec, local, best)
        store = spec.store
        keep = int(dict(config_tree.get("checkpoint") or {}).get("keep", config_lib.CheckpointConfig().keep))
        mirror = RunMirror(store.fs, workdir, local, keep=keep,
                           shown=workdir if store.is_local() else store.fs.unstrip_protocol(workdir))
        try:
            mirror.fetch()
            follow_checkpoint_callback(mirror, spec.checkpoint_callback, best, local)
            fetched = time.time()
        except Exception as exc:  # noqa: BLE001  each filesystem raises its own kinds
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise SetupError(f"cannot read the run {mirror.shown} from the store ({first})") from None
        spec = dataclasses.replace(spec, last_callbacks=(*spec.last_callbacks, PublishCheckpoints(mirror)))
        try:
            outcome = _train(config_tree, spec, local, best)
        finally:  # what training raised goes on; a failed publish is said only after a training that returned
            trained = time.time()
            failed = _publish(mirror, "fit again with the same run_id to resume from the store's last checkpoint")
        if failed is not None:
            raise SetupError(failed)
        if isinstance(outcome, dict) and "seconds" in outcome:
            outcome["seconds"] = {"start": started, "fetch": fetched - entered, **outcome["seconds"],
                                  "publish": time.time() - trained}
        return outcome
    finally:
        shutil.rmtree(local, ignore_errors=True)


def _train(config_tree: Mapping[str, Any], spec: SparkTaskSpec, workdir: str,
           best: Optional[str]) -> Optional[Dict[str, Any]]:
    """One rank's training; rank 0's ``{"history", "model", "size", "final", "seconds"}``, other ranks' ``None``.

    Args:
        config_tree: the job's config as a dict (:func:`hvdkeras.config.from_dict`).
        spec: the data, model and compile arguments.
        workdir: this rank's local folder for the run (:func:`train` makes it).
        best: where the estimator's ``checkpoint_callback`` saves (:func:`_place_checkpoint_callback`), or None.

    Returns:
        Rank 0's results (the model as ``.keras`` bytes).

    Raises:
        HvdkerasError: setup was refused (the config, the data), in one line.
    """
    from hvdkeras import config as config_lib
    from hvdkeras.runtime import distributed
    from hvdkeras.spark.common import gpus
    from hvdkeras.spark.keras.serialization import model_to_bytes
    from hvdkeras.spark.keras.task import SparkTask
    from hvdkeras.training.trainer import Trainer

    began = time.time()
    gpu_index = gpus.choose(spec.use_gpu, gpus.assigned() if spec.use_gpu else [], os.environ)
    config = config_lib.from_dict(config_tree, source="the estimator's parameters")
    trainer = Trainer.from_config(config, workdir, task=SparkTask(spec), gpus=None if spec.use_gpu else [],
                                  gpu_index=gpu_index)
    built = time.time()
    final = trainer.fit()
    fitted = time.time()
    if not distributed.is_chief():
        return None
    if best is not None and os.path.exists(best):
        _load_saved(trainer.model, best, spec.checkpoint_callback, spec.custom_objects)
    return {"history": history_from(trainer.parts.files.metrics), "model": model_to_bytes(trainer.model),
            "size": trainer.process.size, "final": final,
            "seconds": {"setup": built - began, "training": fitted - built}}


def follow_checkpoint_callback(mirror: RunMirror, callback: Any, path: Optional[str], local: str) -> bool:
    """Rank 0: fetches the file Horovod's ``checkpoint_callback`` saved in an earlier start of the run, with its
    best score, and has ``mirror`` publish the file each time it changes; whether a file came back. A callback
    with a ``filepath`` of yours saves there only, neither published nor fetched.

    Args:
        mirror: rank 0's run mirror.
        callback: the estimator's ``checkpoint_callback``, or None.
        path: where it saves (:func:`_place_checkpoint_callback`), or None.
        local: rank 0's local folder for the run.
    """
    if path is None or os.path.dirname(path) != os.path.join(local, BEST_DIR):
        return False
    mirror.follow_best(path, lambda: getattr(callback, "best", None))
    fetched, score = mirror.fetch_best()
    if score is not None and hasattr(callback, "best"):
        callback.best = score  # what a later epoch must beat to be saved
    return fetched


def _place_checkpoint_callback(callback: Any, workdir: str) -> Optional[str]:
    """Where Horovod's ``checkpoint_callback`` saves: its own ``filepath`` when it has one, else
    ``<workdir>/checkpoint_callback/model.keras`` (``model.weights.h5`` with ``save_weights_only``), which rank 0
    publishes to the store; None without one. Its file is what :func:`train` returns, as Horovod's estimator
    does."""
    if callback is None:
        return None
    if not getattr(callback, "filepath", None):
        name = "model.weights.h5" if getattr(callback, "save_weights_only", False) else "model.keras"
        callback.filepath = os.path.join(workdir, BEST_DIR, name)
    return str(callback.filepath)


def _load_saved(model: Any, path: str, callback: Any, custom_objects: Optional[Mapping[str, Any]] = None) -> None:
    """Puts the weights ``callback`` saved at ``path`` into ``model``; a whole saved model is read with the
    estimator's ``custom_objects``, which its layers may name (a custom activation function)."""
    if getattr(callback, "save_weights_only", False):
        model.load_weights(path)
        return
    saved = keras.models.load_model(path, custom_objects=dict(custom_objects or {}), compile=False)
    model.set_weights(saved.get_weights())
