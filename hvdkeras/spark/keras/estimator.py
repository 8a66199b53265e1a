"""Horovod's Spark ``KerasEstimator`` and ``KerasModel``, on hvdkeras's core, petastorm-free and Keras 3-ready.

``KerasEstimator(...).fit(df)`` checks the DataFrame, writes it once to Parquet in the
store (:mod:`hvdkeras.spark.common.data`), and trains on ``num_proc`` Horovod ranks in
Spark tasks (:mod:`hvdkeras.spark.keras.remote`) through the config trainer's core. It
returns a :class:`KerasModel`, a Spark ML ``Transformer`` whose ``transform(df)`` adds one
prediction column per label column. Both take Horovod's parameters, with a getter and a
setter for each (``getBatchSize``, ``setEpochs``, ...); a parameter that has no meaning
here is refused in one line that names it.

The model persists with Spark ML (``save(path)`` / ``KerasModel.load(path)``, also inside a
``PipelineModel``): ``<path>/metadata`` is one line of JSON as Spark's
``DefaultParamsReader`` reads it, and ``<path>/model.keras`` the Keras model.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from pyspark import keyword_only
from pyspark.ml import Estimator, Model
from pyspark.ml.param import Param, Params
from pyspark.ml.param.shared import HasOutputCols
from pyspark.ml.util import MLReadable, MLReader, MLWritable, MLWriter

from hvdkeras.common import log
from hvdkeras.common.errors import PeerLostError, RankFailedError, SetupError
from hvdkeras.spark.common import runs
from hvdkeras.spark.common.backend import Backend, SparkBackend, failure_reason, run_retrying
from hvdkeras.spark.common.store import FilesystemStore
from hvdkeras.spark.keras.persistence import ParamsReader, ParamsWriter

# The fits of this driver, one at a time: a fit's ranks take every task slot they need at once, so fits started
# together (Spark ML's tuning with parallelism > 1 runs them on threads) would wait on each other's slots; they queue.
_ONE_FIT = threading.Lock()
# Horovod's KerasEstimator parameters: (name, the Get/Set suffix, default, what it is).
ESTIMATOR_PARAMS: Tuple[Tuple[str, str, Any, str], ...] = (
    ("num_proc", "NumProc", None, "the number of Horovod ranks (default: the backend's, or Spark's task slots)"),
    ("backend", "Backend", None, "where the ranks run (default: SparkBackend(num_proc))"),
    ("store", "Store", None, "where the Parquet, the checkpoints and the logs go (Store.create(path))"),
    ("model", "Model", None, "the Keras model to train"),
    ("optimizer", "Optimizer", None, "a Keras optimizer at one rank's rate (default: the model's)"),
    ("loss", "Loss", None, "the loss, or one per output"),
    ("loss_weights", "LossWeights", None, "each output's weight in the loss"),
    ("metrics", "Metrics", None, "Keras metrics (exact over every rank's rows)"),
    ("feature_cols", "FeatureCols", None, "the feature columns, one per model input, in order"),
    ("label_cols", "LabelCols", None, "the label columns, one per model output, in order"),
    ("sample_weight_col", "SampleWeightCol", None, "a column of each row's weight in the loss"),
    ("validation", "Validation", None, "a fraction of the rows, or a column whose true rows validate"),
    ("batch_size", "BatchSize", 32, "each rank's batch"),
    ("val_batch_size", "ValBatchSize", None, "each rank's validation batch (default: batch_size)"),
    ("epochs", "Epochs", 1, "the epochs to train"),
    ("callbacks", "Callbacks", None, "Keras callbacks added to every rank's fit"),
    ("random_seed", "RandomSeed", None, "the seed of the weights' shuffle and the validation split"),
    ("shuffle_buffer_size", "ShufflingBufferSize", None, "each rank's shuffle buffer in rows (default: all its rows"
     " held in memory, or as many as fit in 32 MiB when they stream)"),
    ("inmemory_cache_all", "InMemoryCacheAll", False, "each rank reads its rows once and keeps them in memory; by"
     " default they stream from the store each epoch, and a rank's memory does not grow with its rows"),
    ("custom_objects", "CustomObjects", None, "Keras custom objects for the model, loss and metrics"),
    ("run_id", "RunId", None, "the run's name (its folder in the store); a fit with the same run_id resumes"
     " (default: a new, unique name)"),
    ("verbose", "Verbose", 1, "Keras' progress output on rank 0"),
    ("partitions_per_process", "PartitionsPerProcess", 10, "Parquet files per rank"),
    ("train_steps_per_epoch", "TrainStepsPerEpoch", None, "steps per epoch (default: every rank's rows once)"),
    ("label_shapes", "LabelShapes", None, "the shape each label column is reshaped to (default: its output's, where"
     " the column holds as many values per row as the output; else as read, e.g. a class index)"),
    ("gradient_compression", "GradientCompression", None, "Horovod's Compression.fp16 or Compression.none"),
    ("backend_env", "BackendEnv", None, "environment variables for the ranks"),
    ("use_gpu", "UseGpu", True, "use GPUs: the one Spark assigned to the rank's task, else the local rank's;"
     " False keeps every rank off GPUs"),
    ("checkpoint_callback", "CheckpointCallback", None, "a Keras ModelCheckpoint on every rank, rank 0 saving; fit"
     " returns the model it saved last (BestModelCheckpoint(monitor='val_loss'): the best), else the last epoch's"),
    ("resume", "Resume", "auto", "'auto': a run_id whose checkpoints another job trained is refused; 'force':"
     " resume from them anyway"),
    ("allow_nan", "AllowNan", False, "let NaN through in the columns, for a model built to take it"),
    ("max_retries", "MaxRetries", 2, "how often a fit whose rank or executor was lost starts all its ranks again,"
     " each time resuming from the run's last checkpoint in the store, before it stops in one line"),
    ("keep_intermediate_data", "KeepIntermediateData", False, "keep this fit's Parquet in the store after fit"),
    # Horovod's parameters that only tune petastorm's reader: accepted, and a warning says they have no effect.
    ("mp_start_method", "MpStartMethod", None, "petastorm's process start method: no effect here"),
    ("reader_pool_type", "ReaderPoolType", "thread", "petastorm's reader pool: no effect here"),
    ("train_reader_num_workers", "TrainReaderNumWorkers", 2, "petastorm's training readers: no effect here"),
    ("val_reader_num_workers", "ValReaderNumWorkers", 2, "petastorm's validation readers: no effect here"),
    ("tensorflow_dataset_prefetch_buffer_size", "TensorflowDatasetPrefetchBufferSize", 0,
     "the reader's prefetch: no effect here (the trainer prefetches)"),
)
# Horovod's parameters that only tune how petastorm reads: what trains is the same without them.
NO_EFFECT = ("mp_start_method", "reader_pool_type", "train_reader_num_workers", "val_reader_num_workers",
             "tensorflow_dataset_prefetch_buffer_size")
# Horovod's parameters that would change what trains, and have no meaning here, and why: refused in one line.
REFUSED = {
    "data_module": "the data are read with pyarrow into tf.data (no petastorm or NVTabular data module)",
    "continuous_cols": "it belongs to NVTabular's data module, which is not used",
    "categorical_cols": "it belongs to NVTabular's data module, which is not used",
    "transformation_fn": "it is petastorm's; transform the DataFrame before fit()",
    "transformation_edit_fields": "it is petastorm's; transform the DataFrame before fit()",
    "transformation_removed_fields": "it is petastorm's; transform the DataFrame before fit()",
    "validation_steps_per_epoch": "validation reads every validation row once, for exact metrics",
    "compress_sparse_cols": "vectors are written as dense arrays",
}
MODEL_PARAMS: Tuple[Tuple[str, str, Any, str], ...] = (
    ("history", "History", None, "Keras' History.history of the training"),
    ("model", "Model", None, "the trained Keras model"),
    ("feature_columns", "FeatureColumns", None, "the feature columns, one per model input"),
    ("label_columns", "LabelColumns", None, "the label columns the outputs were trained on"),
    ("custom_objects", "CustomObjects", None, "Keras custom objects for loading the model"),
    ("run_id", "RunId", None, "the store's run the model came from"),
    ("predict_batch_size", "PredictBatchSize", 1024, "rows per prediction in transform"),
)


def _declare(cls: Any, params: Sequence[Tuple[str, str, Any, str]]) -> Any:
    """Adds a Spark ML ``Param``, ``get<Suffix>`` and ``set<Suffix>`` to ``cls`` for each parameter."""
    for name, suffix, _, doc in params:
        setattr(cls, name, Param(Params._dummy(), name, doc))

        def getter(self: Any, _name: str = name) -> Any:
            return self.getOrDefault(_name)

        def setter(self: Any, value: Any, _name: str = name) -> Any:
            self._set(**{_name: value})
            return self

        getter.__doc__, setter.__doc__ = f"The {name} parameter: {doc}.", f"Sets {name}: {doc}; returns self."
        setattr(cls, "get" + suffix, getter)
        setattr(cls, "set" + suffix, setter)
    return cls


def _check_kwargs(kwargs: Dict[str, Any], params: Sequence[Tuple[str, str, Any, str]], what: str) -> None:
    known = {p[0] for p in params}
    for key in kwargs:
        if key in REFUSED and what == "KerasEstimator":
            raise SetupError(f"KerasEstimator({key}=...) has no meaning here: {REFUSED[key]}; remove it")
        if key not in known:
            raise SetupError(f"{what} has no parameter {key!r} (Received: {key}=...); it takes "
                             + ", ".join(sorted(known)))


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
        _check_kwargs(self._input_kwargs, ESTIMATOR_PARAMS, "KerasEstimator")
        self._set(**self._input_kwargs)

    @keyword_only
    def setParams(self, **kwargs: Any) -> "KerasEstimator":
        """Sets parameters by keyword (Horovod's names); returns self."""
        _check_kwargs(self._input_kwargs, ESTIMATOR_PARAMS, "KerasEstimator")
        return self._set(**self._input_kwargs)

    # ------------------------------------------------------------------ fit

    def _backend(self) -> Backend:
        backend, num_proc = self.getOrDefault("backend"), self.getOrDefault("num_proc")
        if backend is not None and num_proc is not None:
            raise SetupError("give KerasEstimator num_proc or backend, not both (num_proc is the backend's)")
        return backend or SparkBackend(num_proc=num_proc)

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

    def _config_tree(self, num_proc: int, optimizer: Any) -> Dict[str, Any]:
        from hvdkeras.runtime import compat

        batch = int(self.getOrDefault("batch_size"))
        val_batch = int(self.getOrDefault("val_batch_size") or batch)
        seed = self.getOrDefault("random_seed")
        return {
            "data": {"name": "spark", "global_batch_size": None, "per_rank_batch_size": batch,
                     "eval_global_batch_size": val_batch * num_proc},
            # Horovod's rule: one rank's rate x the ranks (the global batch over one rank's batch).
            "optimizer": {"learning_rate": compat.get_learning_rate(optimizer), "lr_scaling": "ranks"},
            "trainer": {"epochs": int(self.getOrDefault("epochs")),
                        "verbose": min(2, int(self.getOrDefault("verbose"))),
                        "steps_per_epoch": self.getOrDefault("train_steps_per_epoch"), "export": False},
            "checkpoint": {"keep": 2},
            "horovod": {"compression": self._compression()},
            "runtime": {"seed": 42 if seed is None else int(seed)},
        }

    def _check_model_columns(self, model: Any, prepared: Any) -> Tuple[Tuple[int, ...], ...]:
        """Each input's shape; one line when a feature column's length does not fit its input."""
        import numpy as np

        inputs = list(model.inputs)
        if len(inputs) != len(prepared.feature_cols):
            raise SetupError(f"the model has {len(inputs)} inputs but feature_cols names {len(prepared.feature_cols)}"
                             f" columns {list(prepared.feature_cols)}; name one column per input, in order")
        shapes = []
        for column, tensor in zip(prepared.feature_cols, inputs):
            shape = tuple(-1 if d is None else int(d) for d in tuple(tensor.shape)[1:])
            size = prepared.columns[column].size
            need = int(np.prod([d for d in shape if d != -1])) if shape else 1
            if (-1 not in shape and need != size) or (-1 in shape and size % max(need, 1)):
                raise SetupError(f"feature column {column!r} holds {size} values per row, but the model's input"
                                 f" {getattr(tensor, 'name', '')!r} takes shape {shape} ({need} values);"
                                 " reshape the column or the input")
            shapes.append(shape)
        return tuple(shapes)

    def _max_retries(self) -> int:
        retries = self.getOrDefault("max_retries")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise SetupError(f"max_retries must be a whole number of at least 0 (Received: max_retries={retries!r})")
        return retries

    def _compression(self) -> str:
        """The trainer's name for ``gradient_compression``, read from Horovod's ``Compression`` object itself."""
        value = self.getOrDefault("gradient_compression")
        if value is None or value in ("fp16", "none"):
            return str(value or "none")
        from horovod.tensorflow.compression import Compression

        for name in ("fp16", "none"):
            if value is getattr(Compression, name):
                return name
        raise SetupError("gradient_compression must be Horovod's Compression.fp16 or Compression.none (Received:"
                         f" gradient_compression={value!r})")

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
        from hvdkeras.common import stack
        from hvdkeras.spark.keras.task import architecture, describe, portable

        return {"model": architecture(model), "optimizer": describe(portable(optimizer, "optimizer")),
                "loss": describe(portable(loss, "loss")), "loss_weights": describe(self.getOrDefault("loss_weights")),
                **{name: describe(self.getOrDefault(name)) for name in (
                    "feature_cols", "label_cols", "sample_weight_col", "label_shapes", "batch_size", "random_seed",
                    "train_steps_per_epoch", "shuffle_buffer_size")},
                "stack": stack.current().describe()}

    def _fit(self, dataset: Any) -> "KerasModel":
        from hvdkeras.spark.common.data import check_present, prepare

        for param in ("feature_cols", "label_cols"):  # before the run is looked at: a typo is named as one
            check_present(dataset, list(self.getOrDefault(param) or []), param)

        def written(store: FilesystemStore, num_proc: int, data_index: str) -> Any:
            return prepare(
                dataset, store, num_proc, list(self.getOrDefault("feature_cols") or []),
                list(self.getOrDefault("label_cols") or []), sample_weight_col=self.getOrDefault("sample_weight_col"),
                validation=self.getOrDefault("validation"), seed=self.getOrDefault("random_seed"),
                partitions_per_process=int(self.getOrDefault("partitions_per_process")), dataset_idx=data_index,
                allow_nan=bool(self.getOrDefault("allow_nan")))

        return self._fit_run(written, intermediate=True)

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
        from hvdkeras.spark.common.data import from_parquet

        estimator = self.copy(params) if params else self

        def found(store: FilesystemStore, num_proc: int, data_index: str) -> Any:
            return from_parquet(store, num_proc, list(estimator.getOrDefault("feature_cols") or []),
                                list(estimator.getOrDefault("label_cols") or []),
                                sample_weight_col=estimator.getOrDefault("sample_weight_col"), dataset_idx=dataset_idx)

        return estimator._fit_run(found, intermediate=False)

    def _fit_run(self, data: Callable[[FilesystemStore, int, str], Any], intermediate: bool) -> "KerasModel":
        """Holds the run, checks it trained this job, gets the data (``data(store, num_proc, data_index)``) and trains;
        one fit at a time in this driver (:data:`_ONE_FIT`).

        ``intermediate``: the data are this fit's own, removed at the end unless ``keep_intermediate_data``.
        """
        with _ONE_FIT:
            return self._fit_run_alone(data, intermediate)

    def _fit_run_alone(self, data: Callable[[FilesystemStore, int, str], Any], intermediate: bool) -> "KerasModel":
        run_id = self._run_id()
        self._max_retries()  # refused before anything is written
        self._compression()
        model = self.getOrDefault("model")
        if model is None:
            raise SetupError("KerasEstimator needs model= (a Keras model)")
        optimizer, loss = self._compile_args(model)
        store, backend = self._store(), self._backend()
        getattr(backend, "check", lambda: None)()  # a duck-typed backend (run, num_processes) has none
        self._warn_no_effect()
        job = self._job(model, optimizer, loss)
        with runs.RunLock(store, run_id):
            forced = runs.check_same_job(store, run_id, job, self.getOrDefault("resume"))
            if forced:
                log.warning(f"resume='force': run_id {run_id!r} resumes from checkpoints trained by another job"
                            f" ({'; '.join(forced)})")
            data_index = runs.fit_data_index(run_id)
            try:
                prepared = data(store, backend.num_processes(), data_index)
                runs.record_job(store, run_id, job)
                return self._train(model, optimizer, loss, store, backend, prepared, run_id)
            finally:
                if intermediate and not self.getOrDefault("keep_intermediate_data"):
                    for path in (store.get_train_data_path(data_index), store.get_val_data_path(data_index)):
                        if store.exists(path):
                            store.fs.rm(store.get_localized_path(path), recursive=True)

    @staticmethod
    def _output_shapes(model: Any, prepared: Any) -> Optional[List[Optional[Tuple[int, ...]]]]:
        """Each label column's default shape, as Horovod's: its output's, where the column holds as many values per
        row as the output (a 0/1 label of a ``(None, 1)`` output, a one-hot vector); else None: as read."""
        import numpy as np

        outputs = list(model.outputs)
        if len(outputs) != len(prepared.label_cols):
            return None
        shapes: List[Optional[Tuple[int, ...]]] = []
        for column, tensor in zip(prepared.label_cols, outputs):
            shape = tuple(tensor.shape)[1:]
            known = all(d is not None for d in shape)
            size = int(np.prod([int(d) for d in shape])) if known else -1
            shapes.append(tuple(int(d) for d in shape) if known and size == prepared.columns[column].size else None)
        return shapes if any(s is not None for s in shapes) else None

    def _train(self, model: Any, optimizer: Any, loss: Any, store: FilesystemStore, backend: Backend,
               prepared: Any, run_id: str) -> "KerasModel":
        """Trains ``prepared`` on the backend's ranks into run ``run_id``; the model rank 0 returns."""
        from hvdkeras.spark.keras.remote import train
        from hvdkeras.spark.keras.task import SparkTaskSpec, model_from_bytes, model_to_bytes, portable

        num_proc = backend.num_processes()
        input_shapes = self._check_model_columns(model, prepared)
        label_shapes = self.getOrDefault("label_shapes") or self._output_shapes(model, prepared)
        custom_objects = dict(self.getOrDefault("custom_objects") or {})
        use_gpu = bool(self.getOrDefault("use_gpu"))
        spec = SparkTaskSpec(
            store=store, data=prepared, model=model_to_bytes(model), input_shapes=input_shapes,
            label_shapes=tuple(tuple(s) if s else None for s in label_shapes) if label_shapes else None,
            loss=portable(loss, "loss"), loss_weights=self.getOrDefault("loss_weights"),
            metrics=portable(self.getOrDefault("metrics") or [], "metric"),
            optimizer=portable(optimizer, "optimizer"), custom_objects=custom_objects,
            callbacks=tuple(self.getOrDefault("callbacks") or ()),
            shuffle_buffer_size=self.getOrDefault("shuffle_buffer_size"),
            inmemory_cache_all=bool(self.getOrDefault("inmemory_cache_all")),
            checkpoint_callback=self.getOrDefault("checkpoint_callback"), use_gpu=use_gpu)
        workdir = store.get_localized_path(store.get_run_path(run_id))
        checkpoints = store.get_checkpoint_path(run_id) or f"{store.get_run_path(run_id)}/checkpoints"
        shown = store.get_localized_path(checkpoints) if store.is_local() else checkpoints
        env = dict(self.getOrDefault("backend_env") or {})
        if not use_gpu:
            env["CUDA_VISIBLE_DEVICES"] = "-1"
        retries = self._max_retries()
        try:
            results = run_retrying(backend, train, (self._config_tree(num_proc, optimizer), spec, workdir), env,
                                   retries, retry_hint=f", from run_id {run_id!r}'s last checkpoint")
        except RankFailedError as exc:  # a rank failed on the last attempt: the runner says why
            retried = f" and {retries} retr{'y' if retries == 1 else 'ies'}" if retries else ""
            raise PeerLostError(f"fit stopped: a rank failed ({failure_reason(exc)}){retried}; rank 0's checkpoints"
                                f" are in {shown}: fit again with run_id={run_id!r} to resume there") from None
        errors = [r["error"] for r in results if isinstance(r, dict) and "error" in r]
        if errors:
            raise SetupError(errors[0])
        chief = results[0]
        trained = model_from_bytes(chief["model"], custom_objects)
        return KerasModel(history=chief["history"], model=trained, feature_columns=list(prepared.feature_cols),
                          label_columns=list(prepared.label_cols), custom_objects=custom_objects, run_id=run_id)

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


class KerasModel(Model, HasOutputCols, MLWritable, MLReadable):
    """The trained model as a Spark ML ``Transformer``: ``transform(df)`` adds one output column per label column.

    The output columns default to ``<label>__output`` (``setOutputCols`` renames them). A
    model output of one value per row is a ``double`` column; more values are a
    ``DenseVector`` column (an ``array<float>`` when the label column was an array).
    """

    _input_kwargs: Dict[str, Any]  # pyspark's keyword_only keeps the call's keywords here

    @keyword_only
    def __init__(self, **kwargs: Any):
        super().__init__()
        self._setDefault(**{name: default for name, _, default, _ in MODEL_PARAMS})
        _check_kwargs({k: v for k, v in self._input_kwargs.items() if k != "outputCols"}, MODEL_PARAMS, "KerasModel")
        self._set(**self._input_kwargs)
        labels = self._input_kwargs.get("label_columns")
        if labels and "outputCols" not in self._input_kwargs:
            self._set(outputCols=[f"{c}__output" for c in labels])

    def setOutputCols(self, value: List[str]) -> "KerasModel":
        """Names the prediction columns, one per label column; returns self."""
        return self._set(outputCols=list(value))

    def _transform(self, dataset: Any) -> Any:
        import numpy as np
        from pyspark.sql.types import StructField, StructType

        from hvdkeras.spark.common.data import check_present
        from hvdkeras.spark.keras import transform
        from hvdkeras.spark.keras.task import model_to_bytes

        features = list(self.getOrDefault("feature_columns"))
        outputs = list(self.getOrDefault("outputCols"))
        labels = list(self.getOrDefault("label_columns"))
        batch_size = self.getOrDefault("predict_batch_size")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise SetupError(f"predict_batch_size must be a whole number of at least 1 (Received: {batch_size!r})")
        if len(outputs) != len(labels):
            raise SetupError(f"setOutputCols got {len(outputs)} names for {len(labels)} label columns {labels}")
        check_present(dataset, features, "the model's feature_columns")
        for name in outputs:
            if name in dataset.columns:
                raise SetupError(f"the DataFrame already has a column {name!r}; setOutputCols to other names")
        model = self.getOrDefault("model")
        sizes = []
        for tensor in (model.outputs if isinstance(model.outputs, (list, tuple)) else [model.outputs]):
            dims = [int(d) for d in tuple(tensor.shape)[1:] if d is not None]
            sizes.append(int(np.prod(dims)) if dims else 1)
        input_shapes = [tuple(-1 if d is None else int(d) for d in tuple(t.shape)[1:]) for t in model.inputs]
        label_types = {f.name: f.dataType for f in dataset.schema.fields}
        kinds = transform.output_kinds(sizes, [label_types.get(label) for label in labels])
        schema = StructType(list(dataset.schema.fields) +
                            [StructField(name, transform.spark_type(kind), True) for name, kind in zip(outputs, kinds)])
        blob = dataset.sparkSession.sparkContext.broadcast(model_to_bytes(model))
        custom_objects = self.getOrDefault("custom_objects") or {}

        def predict(batches: Iterator[Any]) -> Iterator[Any]:
            return transform.predict_batches(batches, blob.value, custom_objects, features, input_shapes, kinds,
                                             outputs, batch_size)

        return dataset.mapInArrow(predict, schema)

    # ------------------------------------------------------------------ persistence

    def write(self) -> MLWriter:
        """Spark ML's writer: ``model.write().overwrite().save(path)``."""
        return ParamsWriter(self)

    @classmethod
    def read(cls) -> MLReader:
        """Spark ML's reader: ``KerasModel.read().load(path)``, or ``KerasModel.load(path)``."""
        return ParamsReader(cls)

    @classmethod
    def load(cls, path: str, safe_mode: bool = True) -> "KerasModel":
        """The model saved at ``path``; ``safe_mode=False`` also loads what runs code when loaded (the earlier,
        pickled format; Keras' unsafe layers), for a folder whose origin you trust."""
        return ParamsReader(cls, safe_mode=safe_mode).load(path)


_declare(KerasEstimator, ESTIMATOR_PARAMS)
_declare(KerasModel, MODEL_PARAMS)
