"""The parameters of Horovod's ``KerasEstimator`` and ``KerasModel``, as Spark ML ``Param``s with getters and setters.

Each parameter is ``(name, the Get/Set suffix, default, what it is)``. Horovod's parameters that only tune
petastorm's reader are accepted with a warning (:data:`NO_EFFECT`); those that would change what trains and have
no meaning here are refused in one line (:data:`REFUSED`).
"""
from __future__ import annotations

from typing import Any, Dict, Sequence, Tuple

from pyspark.ml.param import Param, Params

from hvdkeras.common.errors import SetupError

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
    ("shuffle", "Shuffle", True, "reshuffle each rank's rows every epoch; False: each epoch reads them in the order"
     " they were written"),
    ("backward_passes_per_step", "BackwardPassesPerStep", 1, "batches whose gradients each rank sums before one"
     " allreduce and one update (gradient accumulation; the rate stays one rank's rate x the ranks)"),
    ("inmemory_cache_all", "InMemoryCacheAll", False, "each rank reads its rows once and keeps them in memory; by"
     " default they stream from the store each epoch, and a rank's memory does not grow with its rows"),
    ("custom_objects", "CustomObjects", None, "Keras custom objects for the model, loss and metrics"),
    ("run_id", "RunId", None, "the run's name (its folder in the store); a fit with the same run_id resumes"
     " (default: a new, unique name)"),
    ("verbose", "Verbose", 1, "Keras' progress output on rank 0"),
    ("partitions_per_process", "PartitionsPerProcess", 10, "Parquet files per rank, at most: a table of fewer"
     " than that many row groups (8192 rows each) a rank gets fewer files, one at least"),
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
# Horovod's KerasEstimator parameters that came after 0.28.1 (0.28.1's are HOROVOD_DEFAULTS["KerasEstimator"]'s
# keys), for the reference's comparison: a parameter in neither is hvdkeras's own.
HOROVOD_LATER_PARAMS = ("tensorflow_dataset_prefetch_buffer_size",)
# Horovod 0.28.1's defaults, as facts for docs/spark-reference.md's comparison (tools/reference_docs.py), read from
# its sources (`git show v0.28.1:<path>`): the KerasEstimator's and KerasModel's are what their getters return
# unset (horovod/spark/common/params.py's and keras/estimator.py's _setDefault: the keyword defaults of a
# keyword_only __init__ are never set); run's are horovod/spark/runner.py's signature; SparkBackend's
# horovod/spark/common/backend.py's, which passes any other keyword to horovod.spark.run. Each is
# (default as Python source, "" for none: a required argument; what Horovod makes of it, where that differs from
# hvdkeras's, else "").
HOROVOD_DEFAULTS: Dict[str, Dict[str, Tuple[str, str]]] = {
    "KerasEstimator": {
        "num_proc": ("None", "`spark.default.parallelism`"),
        "data_module": ("PetastormDataModule", ""),
        "model": ("None", ""),
        "backend": ("None", ""),
        "store": ("None", ""),
        "custom_objects": ("{}", ""),
        "optimizer": ("None", ""),
        "loss": ("None", ""),
        "loss_weights": ("None", ""),
        "sample_weight_col": ("None", ""),
        "gradient_compression": ("None", ""),
        "metrics": ("[]", ""),
        "feature_cols": ("None", ""),
        "label_cols": ("None", ""),
        "continuous_cols": ("None", ""),
        "categorical_cols": ("None", ""),
        "validation": ("None", ""),
        "callbacks": ("[]", ""),
        "batch_size": ("32", ""),
        "val_batch_size": ("None", ""),
        "epochs": ("1", ""),
        "verbose": ("1", ""),
        "random_seed": ("None", ""),
        "shuffle_buffer_size": ("None", "deprecated there (a value only warns; the reader shuffles as `shuffle` says)"),
        "shuffle": ("True", ""),
        "partitions_per_process": ("10", "at most that many: fewer for a small table, whose files would hold a few rows"
                                   " each"),
        "run_id": ("None", ""),
        "train_steps_per_epoch": ("None", ""),
        "validation_steps_per_epoch": ("None", ""),
        "transformation_fn": ("None", ""),
        "transformation_edit_fields": ("None", ""),
        "transformation_removed_fields": ("None", ""),
        "train_reader_num_workers": ("2", ""),
        "val_reader_num_workers": ("2", ""),
        "reader_pool_type": ("'thread'", ""),
        "label_shapes": ("None", ""),
        "checkpoint_callback": ("None", ""),
        "inmemory_cache_all": ("False", ""),
        "backend_env": ("{'LIBHDFS_OPTS': '-Xms2048m -Xmx2048m'}", ""),
        "use_gpu": ("True", ""),
        "mp_start_method": ("None", ""),
        "compress_sparse_cols": ("False", ""),
        "backward_passes_per_step": ("1", "a Param only (its getter and setter), not a keyword of"
                                          " `KerasEstimator(...)`, and the Keras trainer never reads it"),
    },
    "KerasModel": {
        "history": ("None", ""),
        "model": ("None", ""),
        "feature_columns": ("None", ""),
        "label_columns": ("None", ""),
        "custom_objects": ("{}", ""),
        "run_id": ("None", ""),
    },
    "run": {
        "fn": ("", ""),
        "args": ("()", ""),
        "kwargs": ("{}", ""),
        "num_proc": ("None", "`spark.default.parallelism`"),
        "start_timeout": ("None", "`HOROVOD_SPARK_START_TIMEOUT` if set, else 600 s"),
        "use_mpi": ("None", "unless `use_gloo` is set, MPI when Horovod was built with it, else Gloo"),
        "use_gloo": ("None", "unless `use_mpi` is set, MPI when Horovod was built with it, else Gloo"),
        "extra_mpi_args": ("None", ""),
        "env": ("None", ""),
        "stdout": ("None", ""),
        "stderr": ("None", ""),
        "verbose": ("1", ""),
        "nics": ("None", ""),
        "prefix_output_with_timestamp": ("False", ""),
        "executable": ("None", "`sys.executable`, the driver's Python, for every rank"),
    },
    "SparkBackend": {
        "num_proc": ("None", "`spark.default.parallelism`"),
        "env": ("None", ""),
        "**kwargs": ("", "every other keyword, passed to `horovod.spark.run` (its defaults)"),
    },
}
MODEL_PARAMS: Tuple[Tuple[str, str, Any, str], ...] = (
    ("history", "History", None, "Keras' History.history of the training"),
    ("model", "Model", None, "the trained Keras model"),
    ("feature_columns", "FeatureColumns", None, "the feature columns, one per model input"),
    ("label_columns", "LabelColumns", None, "the label columns the outputs were trained on"),
    ("custom_objects", "CustomObjects", None, "Keras custom objects for loading the model"),
    ("run_id", "RunId", None, "the store's run the model came from"),
    ("predict_batch_size", "PredictBatchSize", 1024, "rows per prediction in transform"),
    ("fit_seconds", "FitSeconds", None, "where the fit's time went, in seconds: the checks, the data written, the"
     " ranks (rank 0's start, TensorFlow's import among it, set-up, training, publishing) and the model's way back"),
)


def declare(cls: Any, params: Sequence[Tuple[str, str, Any, str]]) -> Any:
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


def check_kwargs(kwargs: Dict[str, Any], params: Sequence[Tuple[str, str, Any, str]], what: str) -> None:
    """Refuses, in one line, a keyword ``what`` (``KerasEstimator`` or ``KerasModel``) does not take."""
    known = {p[0] for p in params}
    for key in kwargs:
        if key in REFUSED and what == "KerasEstimator":
            raise SetupError(f"KerasEstimator({key}=...) has no meaning here: {REFUSED[key]}; remove it")
        if key not in known:
            raise SetupError(f"{what} has no parameter {key!r} (Received: {key}=...); it takes "
                             + ", ".join(sorted(known)))
