"""Horovod's Spark ``KerasEstimator``, on hvdkeras's core, petastorm-free and Keras 3-ready.

``KerasEstimator(...).fit(df)`` checks the DataFrame, writes it once to Parquet in the
store (:mod:`hvdkeras.spark.common.data`), and trains on ``num_proc`` Horovod ranks in
Spark tasks (:mod:`hvdkeras.spark.keras.remote`) through the config trainer's core. It
returns a :class:`hvdkeras.spark.keras.model.KerasModel`, a Spark ML ``Transformer``. Both
take Horovod's parameters (:mod:`hvdkeras.spark.keras.params`), with a getter and a setter
for each (``getBatchSize``, ``setEpochs``, ...); a parameter that has no meaning here is
refused in one line that names it. The unfitted estimator persists with Spark ML too.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Dict, Optional, Tuple, Union

from pyspark import keyword_only
from pyspark.ml import Estimator
from pyspark.ml.util import MLReadable, MLReader, MLWritable, MLWriter

from hvdkeras.common import log, stack
from hvdkeras.common.errors import PeerLostError, RankFailedError, SetupError
from hvdkeras.engines import failures
from hvdkeras.engines.failures import reason_of as failure_reason
from hvdkeras.spark.common import environment, runs, versions
from hvdkeras.spark.common.backend import Backend, SparkBackend, run_retrying
from hvdkeras.spark.common.connect import session_of
from hvdkeras.spark.common.data import check_present, from_parquet, prepare
from hvdkeras.spark.common.store import FilesystemStore
from hvdkeras.spark.keras import fit_settings, model_checks
from hvdkeras.spark.keras.model import KerasModel
from hvdkeras.spark.keras.params import ESTIMATOR_PARAMS, NO_EFFECT, check_kwargs, declare
from hvdkeras.spark.keras.persistence import ParamsReader, ParamsWriter
from hvdkeras.spark.keras.remote import train
from hvdkeras.spark.keras.serialization import model_from_bytes, model_to_bytes
from hvdkeras.spark.keras.task import SparkTaskSpec, architecture, describe, to_portable

__all__ = ["KerasEstimator", "KerasModel"]  # KerasModel: where models saved before the split name it

# The fits of this driver, one at a time: a fit's ranks take every task slot they need at once, so fits started
# together (Spark ML's tuning with parallelism > 1 runs them on threads) would wait on each other's slots; they queue.
_ONE_FIT = threading.Lock()
class _JobTag:
    """A Spark job tag on this thread's jobs while a fit runs (``with``), so that :meth:`cancel` stops them alone;
    through a Spark Connect ``session``, the session's tag."""

    def __init__(self, prefix: str, session: Any = None):
        import secrets

        self.tag = f"{prefix}-{secrets.token_hex(4)}"
        self.session = session

    @staticmethod
    def _context() -> Any:
        from pyspark import SparkContext

        return SparkContext._active_spark_context

    def __enter__(self) -> "_JobTag":
        if self.session is not None:
            self.session.addTag(self.tag)
            return self
        sc = self._context()
        if sc is not None and hasattr(sc, "addJobTag"):
            sc.addJobTag(self.tag)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.session is not None:
            self.session.removeTag(self.tag)
            return
        sc = self._context()
        if sc is not None and hasattr(sc, "removeJobTag"):
            sc.removeJobTag(self.tag)

    def cancel(self) -> None:
        """Cancels the running jobs that carry the tag (from another thread: the run lock's heartbeat)."""
        if self.session is not None:
            self.session.interruptTag(self.tag)
            return
        sc = self._context()
        if sc is not None and hasattr(sc, "cancelJobsWithTag"):
            sc.cancelJobsWithTag(self.tag)


class KerasEstimator(Estimator, MLWritable, MLReadable):
    """Trains a Keras model on a Spark DataFrame with Horovod (Horovod's ``KerasEstimator`` arguments).

    Example::

        est = KerasEstimator(num_proc=2, store=Store.create("/shared/store"), model=model, optimizer=opt,
                             loss="categorical_crossentropy", metrics=["accuracy"], feature_cols=["features"],
                             label_cols=["label_vec"], batch_size=128, epochs=12)
        keras_model = est.fit(train_df).setOutputCols(["label_prob"])
        predictions = keras_model.transform(test_df)
    """

    _input_kwargs: Dict[str, Any]  # pyspark's keyword_only keeps the call's keywords here

    @keyword_only
    def __init__(self, **kwargs: Any):
        super().__init__()
        self._setDefault(**{name: default for name, _, default, _ in ESTIMATOR_PARAMS})
        check_kwargs(self._input_kwargs, ESTIMATOR_PARAMS, "KerasEstimator")
        self._set(**self._input_kwargs)

    @keyword_only
    def setParams(self, **kwargs: Any) -> "KerasEstimator":
        """Sets parameters by keyword (Horovod's names); returns self."""
        check_kwargs(self._input_kwargs, ESTIMATOR_PARAMS, "KerasEstimator")
        return self._set(**self._input_kwargs)

    # ------------------------------------------------------------------ fit

    def _backend(self, session: Any = None) -> Backend:
        """The backend of the fit: the one given, or a SparkBackend; through a Spark Connect ``session``, a
        SparkBackend starts its ranks through it."""
        backend, num_proc = self.getOrDefault("backend"), self.getOrDefault("num_proc")
        if backend is not None and num_proc is not None:
            raise SetupError("give KerasEstimator num_proc or backend, not both (num_proc is the backend's)")
        if session is not None and isinstance(backend, SparkBackend):
            return backend.through(session)
        return backend or SparkBackend(num_proc=num_proc, session=session)

    def _store(self) -> FilesystemStore:
        store = self.getOrDefault("store")
        if store is None:
            raise SetupError("KerasEstimator needs store=: Store.create('<a folder every executor sees, or s3://...>')")
        return store  # any fsspec store: the ranks train locally and rank 0 publishes to it (spark/common/publish.py)

    def _compile_args(self, model: Any) -> Tuple[Any, Any]:
        """(the optimizer, the loss), refused in one line when neither the estimator nor the model has them."""
        optimizer = self.getOrDefault("optimizer") or getattr(model, "optimizer", None)
        if optimizer is None:
            raise SetupError("KerasEstimator needs optimizer= (or a compiled model)")
        loss = self.getOrDefault("loss")
        if loss is None:
            raise SetupError("KerasEstimator needs loss= (a Keras loss, or one per output)")
        return optimizer, loss

    def _run_id(self) -> str:
        run_id = self.getOrDefault("run_id")
        return runs.new_run_id() if run_id is None else runs.check_run_id(run_id)

    def _warn_no_effect(self) -> None:
        for name in NO_EFFECT:
            if self.isSet(name):
                log.warning(f"KerasEstimator({name}=...) has no effect here: it only tunes petastorm's reader, and"
                            " each rank reads its rows with pyarrow into tf.data")

    def _job(self, model: Any, optimizer: Any, loss: Any) -> Dict[str, str]:
        """What a run's checkpoints were trained by (:func:`hvdkeras.spark.common.runs.check_same_job`)."""
        return {"model": architecture(model), "optimizer": describe(to_portable(optimizer, "optimizer")),
                "loss": describe(to_portable(loss, "loss")),
                "loss_weights": describe(self.getOrDefault("loss_weights")),
                **{name: describe(self.getOrDefault(name)) for name in (
                    "feature_cols", "label_cols", "sample_weight_col", "label_shapes", "batch_size", "random_seed",
                    "train_steps_per_epoch", "shuffle_buffer_size", "shuffle",
                    "backward_passes_per_step")},
                "stack": stack.current().describe()}

    def _fit(self, dataset: Any) -> "KerasModel":
        files = fit_settings.whole(self.getOrDefault, "partitions_per_process", 1)
        for param in ("feature_cols", "label_cols"):  # before the run is looked at: a typo is named as one
            check_present(dataset, list(self.getOrDefault(param) or []), param)

        feature_cols = list(self.getOrDefault("feature_cols") or [])
        model = self.getOrDefault("model")  # a fit without one is refused before the data is asked for

        def written(store: FilesystemStore, num_proc: int, data_index: str) -> Any:
            return prepare(
                dataset, store, num_proc, feature_cols,
                list(self.getOrDefault("label_cols") or []), sample_weight_col=self.getOrDefault("sample_weight_col"),
                validation=self.getOrDefault("validation"), seed=self.getOrDefault("random_seed"),
                partitions_per_process=files or 1, dataset_idx=data_index,
                allow_nan=fit_settings.flag(self.getOrDefault, "allow_nan"),
                check_columns=lambda columns: model_checks.feature_shapes(model, feature_cols, columns))

        return self._fit_run(written, intermediate=True, session=session_of(dataset))

    def fit_on_parquet(self, params: Optional[Dict[Any, Any]] = None,
                       dataset_idx: Union[None, int, str] = None) -> "KerasModel":
        """Trains on Parquet already in the store (Horovod's ``fit_on_parquet``).

        Args:
            params: parameters that override this estimator's for this fit, as ``fit``'s.
            dataset_idx: which of the store's datasets: the rows at ``store.get_train_data_path(dataset_idx)``, and
                validation rows at ``store.get_val_data_path(dataset_idx)`` when there are any there.

        Returns:
            The trained model, as ``fit`` returns it.
        """
        estimator = self.copy(params) if params else self

        def found(store: FilesystemStore, num_proc: int, data_index: str) -> Any:
            return from_parquet(store, num_proc, list(estimator.getOrDefault("feature_cols") or []),
                                list(estimator.getOrDefault("label_cols") or []),
                                sample_weight_col=estimator.getOrDefault("sample_weight_col"), dataset_idx=dataset_idx)

        return estimator._fit_run(found, intermediate=False)

    def _fit_run(self, data: Callable[[FilesystemStore, int, str], Any], intermediate: bool,
                 session: Any = None) -> "KerasModel":
        """Holds the run, checks it trained this job, gets the data (``data(store, num_proc, data_index)``) and trains;
        one fit at a time in this driver (:data:`_ONE_FIT`).

        ``intermediate``: the data are this fit's own, removed at the end unless ``keep_intermediate_data``.
        """
        with _ONE_FIT:
            return self._fit_run_alone(data, intermediate, session)

    def _fit_run_alone(self, data: Callable[[FilesystemStore, int, str], Any], intermediate: bool,
                       session: Any) -> "KerasModel":
        began = time.monotonic()
        versions.require_compatible("KerasEstimator.fit")
        run_id = self._run_id()
        # refused before anything is written, and before the backend's checks ask Spark anything
        max_retries = fit_settings.max_retries(self.getOrDefault)
        compression = fit_settings.compression(self.getOrDefault)
        model = self.getOrDefault("model")
        if model is None:
            raise SetupError("KerasEstimator needs model= (a Keras model)")
        optimizer, loss = self._compile_args(model)
        store, backend = self._store(), self._backend(session)
        getattr(backend, "check", lambda: None)()  # a duck-typed backend (run, num_processes) has none
        settings = fit_settings.Checked(fit_settings.config_tree(self.getOrDefault, backend.num_processes(), optimizer,
                                                                 compression), max_retries)
        self._warn_no_effect()
        job = self._job(model, optimizer, loss)
        tag = _JobTag(f"hvdkeras-fit-{run_id}", session)
        run = runs.StoredRun(store, run_id)
        lock = run.lock(on_lost=tag.cancel)
        with lock, tag:
            try:
                fitted = self._fit_holding(data, intermediate, run, backend, model, optimizer, loss, job, settings,
                                           began)
            except Exception:
                lost = lock.lost_error()  # a fit whose run another fit took over says so, not what the cancel broke
                if lost is None:
                    raise
                raise lost from None
            lost = lock.lost_error()
            if lost is not None:
                raise lost
            return fitted

    def _fit_holding(self, data: Callable[[FilesystemStore, int, str], Any], intermediate: bool,
                     run: runs.StoredRun, backend: Any, model: Any, optimizer: Any, loss: Any, job: Dict[str, Any],
                     settings: fit_settings.Checked, began: float) -> "KerasModel":
        """The fit of a run this fit holds (:class:`runs.RunLock`): the job checked and recorded, the data, training."""
        forced = run.check_job(job, self.getOrDefault("resume"))
        if forced:
            log.warning(f"resume='force': run_id {run.run_id!r} resumes from checkpoints trained by another job"
                        f" ({'; '.join(forced)})")
        try:
            checked = time.monotonic()
            prepared = data(run.store, backend.num_processes(), run.data_index)
            run.record_job(job)
            seconds = {"checks": checked - began, "data": time.monotonic() - checked}
            return self._train(model, optimizer, loss, run, backend, prepared, settings, seconds)
        finally:
            if intermediate and not fit_settings.flag(self.getOrDefault, "keep_intermediate_data"):
                run.remove_data()

    def _train(self, model: Any, optimizer: Any, loss: Any, run: runs.StoredRun, backend: Backend,
               prepared: Any, settings: fit_settings.Checked, seconds: Optional[Dict[str, float]] = None
               ) -> "KerasModel":
        """Trains ``prepared`` on the backend's ranks into ``run`` with the fit's checked ``settings``; the
        model rank 0 returns, with where the fit's time went (``seconds`` so far, then the ranks' and the model's:
        :func:`_fit_seconds`)."""
        before_ranks = time.monotonic()
        config, retries = settings.config, settings.max_retries
        input_shapes = model_checks.input_shapes(model, prepared)
        label_shapes = self.getOrDefault("label_shapes") or model_checks.output_shapes(model, prepared)
        custom_objects = dict(self.getOrDefault("custom_objects") or {})
        use_gpu = fit_settings.flag(self.getOrDefault, "use_gpu")
        spec = SparkTaskSpec(
            store=run.store, data=prepared, model=model_to_bytes(model), input_shapes=input_shapes,
            label_shapes=tuple(tuple(s) if s else None for s in label_shapes) if label_shapes else None,
            loss=to_portable(loss, "loss"), loss_weights=self.getOrDefault("loss_weights"),
            metrics=to_portable(self.getOrDefault("metrics") or [], "metric"),
            optimizer=to_portable(optimizer, "optimizer"), custom_objects=custom_objects,
            callbacks=tuple(self.getOrDefault("callbacks") or ()),
            shuffle_buffer_size=self.getOrDefault("shuffle_buffer_size"),
            shuffle=fit_settings.flag(self.getOrDefault, "shuffle"),
            inmemory_cache_all=fit_settings.flag(self.getOrDefault, "inmemory_cache_all"),
            checkpoint_callback=self.getOrDefault("checkpoint_callback"), use_gpu=use_gpu)
        run_id = run.run_id
        env = environment.for_store(run.store.fs_protocol(), os.environ)  # the store's credentials, for its kind only
        env.update(self.getOrDefault("backend_env") or {})
        if not use_gpu:
            env["CUDA_VISIBLE_DEVICES"] = "-1"
        try:
            ranks_began = time.monotonic()
            results = run_retrying(backend, failures.returning_refusals(train), (config, spec, run.folder), env,
                                   retries, retry_hint=f", from run_id {run_id!r}'s last checkpoint")
            ranks_ended = time.monotonic()
        except RankFailedError as exc:  # a rank failed on the last attempt: the runner says why
            retried = f" and {retries} retr{'y' if retries == 1 else 'ies'}" if retries else ""
            reason = failure_reason(exc)
            raise PeerLostError(f"fit stopped: a rank failed ({reason}){retried}; rank 0's checkpoints"
                                f" are in {run.checkpoints_shown}: fit again with run_id={run_id!r} to resume"
                                f" there{failures.memory_advice(reason)}") from None
        chief = failures.raise_refused(results)[0]  # a rank's user error, typed, as the fit's
        trained = model_from_bytes(chief["model"], custom_objects)
        fit_seconds = _fit_seconds({**(seconds or {}), "prepare_ranks": ranks_began - before_ranks},
                                   ranks_ended - ranks_began, chief.get("seconds") or {},
                                   time.monotonic() - ranks_ended)
        log.info("fit took " + ", ".join(f"{k} {v:.1f} s" for k, v in fit_seconds.items()))
        return KerasModel(history=chief["history"], model=trained, feature_columns=list(prepared.feature_cols),
                          label_columns=list(prepared.label_cols), custom_objects=custom_objects, run_id=run_id,
                          fit_seconds=fit_seconds)

    def write(self) -> MLWriter:
        """Spark ML's writer (``estimator.save(path)``): its parameters but the store and the backend, which a
        loaded estimator is given again (``fit(df, params={est.store: ..., est.backend: ...})``)."""
        return ParamsWriter(self, skip=("model", "store", "backend"))

    @classmethod
    def read(cls) -> MLReader:
        """Spark ML's reader: ``KerasEstimator.load(path)``."""
        return ParamsReader(cls)

    @classmethod
    def load(cls, path: str, safe_mode: bool = True) -> "KerasEstimator":
        """The estimator saved at ``path``; ``safe_mode=False`` also loads what runs code when loaded (the earlier,
        pickled format; Keras' unsafe layers), for a folder whose origin you trust."""
        return ParamsReader(cls, safe_mode=safe_mode).load(path)


def _fit_seconds(driver: Dict[str, float], ranks: float, chief: Dict[str, float],
                 model_back: float) -> Dict[str, float]:
    """Where a fit's time went, in order: on the driver, the checks and the data written; the ranks, from the
    backend's start to their results, split as rank 0 saw it (its process's start, TensorFlow's import among it;
    fetching the run; setting up; training; publishing; the rest is Spark's and the results' way back); the model
    loaded from rank 0's bytes; and the total."""
    found = {"checks": driver.get("checks", 0.0), "data": driver.get("data", 0.0),
             "prepare_ranks": driver.get("prepare_ranks", 0.0), "ranks": ranks}
    parts = {f"rank_{k}": float(v) for k, v in chief.items()}
    found.update(parts)
    found["ranks_other"] = max(0.0, ranks - sum(parts.values()))
    found["model_back"] = model_back
    found["total"] = found["checks"] + found["data"] + found["prepare_ranks"] + ranks + model_back
    return {k: round(v, 2) for k, v in found.items()}


declare(KerasEstimator, ESTIMATOR_PARAMS)
