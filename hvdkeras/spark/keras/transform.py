"""A fitted model's ``transform``: one vectorized UDF over the feature columns, the model loaded once per Python
worker.

On the driver: :func:`output_kinds` decides each output column's type, :func:`feature_column` converts each feature
column in Spark's JVM to what the workers read fastest (a vector, dense or sparse, to an ``array<float>``), and
:func:`udf_type` and :func:`output_column` say what the UDF returns and how it becomes each output column. Only the
feature columns go to Python and only the predictions come back; the other columns, the feature columns' own
values among them, never leave the JVM (a ``mapInArrow`` sent every column both ways, and a vector column through
Arrow at a fraction of an array's speed: docs/performance.md).

In the workers, :func:`predict_arrow` (a scalar Arrow UDF, pyspark 4.1 and newer) or :func:`predict_pandas` (a
scalar pandas UDF, before) reads each Arrow batch's columns as NumPy arrays and predicts ``batch_size`` rows at a
time (:func:`predict_matrices`). The model comes from a broadcast of its Keras file and stays loaded in the worker
(Spark reuses its Python workers) for every later batch and ``transform`` of the same model.
"""
from __future__ import annotations

import hashlib
import io
import math
import os
import sys
import zipfile
from typing import Any, Dict, List, Sequence, Tuple

from hvdkeras.common.errors import SetupError

_MODELS: Dict[str, Any] = {}  # this worker's loaded models, by their model_digest
_LAST_BLOB: List[Any] = [None, ""]  # the last Keras file seen here and its model_digest
KERAS_METADATA = "metadata.json"  # the .keras entry with the Keras version and the time of saving


def output_kinds(sizes: Sequence[int], label_types: Sequence[Any]) -> List[str]:
    """Each output's column kind: ``scalar`` (a double) for one value per row, else ``array`` (``array<float>``)
    where its label column was an array, else ``vector`` (a ``DenseVector``).

    Args:
        sizes: each model output's values per row.
        label_types: each output's label column's Spark type (None where unknown).
    """
    from pyspark.sql.types import ArrayType

    return ["scalar" if size == 1 else "array" if isinstance(kind, ArrayType) else "vector"
            for size, kind in zip(sizes, label_types)]


def _as_matrix(column: Any, shape: Tuple[int, ...]) -> Any:
    """An Arrow column (a list of numbers a row, or a number) as a float32 array of ``(rows, *shape)``."""
    import numpy as np
    import pyarrow as pa

    rows = len(column)
    if pa.types.is_list(column.type) or pa.types.is_large_list(column.type) or \
            pa.types.is_fixed_size_list(column.type):
        flat = column.flatten().to_numpy(zero_copy_only=False)
        return flat.astype(np.float32, copy=False).reshape((rows, *shape))
    return column.to_numpy(zero_copy_only=False).astype(np.float32, copy=False).reshape((rows, *shape))


def _feature(column: Any, name: str, shape: Tuple[int, ...]) -> Any:
    """Feature column ``name``'s Arrow array as the model's input of ``shape``; one line when its rows do not fit."""
    try:
        return _as_matrix(column, shape)
    except (ValueError, IndexError):
        need = math.prod(d for d in shape if d > 0)
        raise SetupError(f"feature column {name!r} holds rows that do not fit the model's input shape {shape}: every"
                         f" row must hold {need} values{' (or a multiple)' if -1 in shape else ''}; fix or drop those"
                         " rows before transform()") from None


def _use_the_tasks_gpu() -> None:
    """Before TensorFlow is imported in this worker: where Spark assigned this task a GPU, TensorFlow sees that one."""
    if "tensorflow" in sys.modules:
        return
    from pyspark import TaskContext

    from hvdkeras.spark.common import gpus

    context = TaskContext.get()
    assigned = context.resources().get("gpu") if context is not None else None
    gpus.choose(True, [str(a) for a in assigned.addresses] if assigned is not None else [], os.environ)


def _use_the_tasks_cpus() -> None:
    """Before TensorFlow's runtime starts in this worker: as many compute threads as Spark gave the task CPUs
    (``spark.task.cpus``), so the tasks running side by side on an executor do not each start one a core (a
    worker that ran TensorFlow before keeps its threads)."""
    from pyspark import TaskContext

    from hvdkeras.common.horovod_env import thread_budget
    from hvdkeras.runtime.tensorflow_import import set_thread_budget

    context = TaskContext.get()
    set_thread_budget(thread_budget(int(context.cpus()) if context is not None else os.cpu_count() or 1, 1))


def model_digest(blob: bytes) -> str:
    """What identifies the model of Keras file ``blob`` in a worker's cache: the SHA-256 of a ``.keras`` archive's
    entries but ``metadata.json``, which records the second it was saved (each ``transform`` saves the model again:
    the same model must not load again in every worker); of the whole ``blob`` for any other file."""
    digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as archive:
            for name in sorted(archive.namelist()):
                if name != KERAS_METADATA:
                    digest.update(name.encode("utf-8") + b"\0")
                    entry = hashlib.sha256()
                    with archive.open(name) as f:  # a chunk at a time: the weights may be most of a large file
                        for chunk in iter(lambda: f.read(1 << 20), b""):
                            entry.update(chunk)
                    digest.update(entry.digest())
    except (zipfile.BadZipFile, OSError, ValueError):
        return hashlib.sha256(blob).hexdigest()
    return digest.hexdigest()


def _model(blob: bytes, custom_objects: Dict[str, Any]) -> Any:
    """The model of Keras file ``blob``, loaded once in this worker (the same model saved again by a later
    ``transform`` included: :func:`model_digest`)."""
    if _LAST_BLOB[0] is not blob:  # each Arrow batch of a task brings the same bytes: read them once
        _LAST_BLOB[:] = [blob, model_digest(blob)]
    digest = _LAST_BLOB[1]
    if digest not in _MODELS:
        _use_the_tasks_gpu()
        from hvdkeras.runtime import tensorflow_import

        tensorflow_import.load()  # as the command lines import it: quiet, matplotlib at its first use
        _use_the_tasks_cpus()
        from hvdkeras.spark.keras.serialization import model_from_bytes

        _MODELS.clear()  # one model at a time per worker: a new model replaces the last
        _MODELS[digest] = model_from_bytes(blob, custom_objects)
    return _MODELS[digest]


def feature_column(dataset: Any, name: str) -> Any:
    """Column ``name`` of ``dataset`` as the prediction function receives it: a Spark ML vector (dense or sparse)
    converted in Spark's JVM to an ``array<float>`` (``vector_to_array``: a vector through Arrow is a struct of
    lists, several times slower); an array or a number as it is (a cast in the JVM cost more than it saved). The
    workers say in one line when a column does not fit the model."""
    from pyspark.ml.functions import vector_to_array
    from pyspark.ml.linalg import VectorUDT

    column = dataset[name]
    return vector_to_array(column, "float32") if isinstance(dataset.schema[name].dataType, VectorUDT) else column


def udf_type(kinds: Sequence[str]) -> Any:
    """What the prediction function returns: one output's column (a ``double``, an ``array<float>``, or an
    ``array<double>`` that :func:`output_column` makes a vector), or a struct ``o0, o1, ...`` of several."""
    from pyspark.sql.types import ArrayType, DoubleType, FloatType, StructField, StructType

    types = {"scalar": DoubleType(), "array": ArrayType(FloatType()), "vector": ArrayType(DoubleType())}
    if len(kinds) == 1:
        return types[kinds[0]]
    return StructType([StructField(f"o{i}", types[kind], True) for i, kind in enumerate(kinds)])


def output_column(column: Any, kind: str) -> Any:
    """The prediction function's column for one output, as the output column's type: a ``double``, an
    ``array<float>``, or a ``DenseVector`` (``array_to_vector`` in the JVM)."""
    if kind != "vector":
        return column
    from pyspark.ml.functions import array_to_vector

    return array_to_vector(column)


def predict_matrices(inputs: Sequence[Any], blob: bytes, custom_objects: Dict[str, Any], batch_size: int) -> List[Any]:
    """Each model output's predictions for ``inputs`` (one float32 array per model input, ``(rows, *shape)``), as a
    ``(rows, values)`` array; ``batch_size`` rows per ``predict_on_batch`` (runs in Spark's Python workers)."""
    import numpy as np

    rows = len(inputs[0])
    model = _model(blob, custom_objects)
    parts: List[List[Any]] = []
    for start in range(0, rows, batch_size):
        chunk = [x[start:start + batch_size] for x in inputs]
        predicted = model.predict_on_batch(chunk[0] if len(chunk) == 1 else chunk)
        predicted = predicted if isinstance(predicted, (list, tuple)) else [predicted]
        if not parts:
            parts = [[] for _ in predicted]
        for part, p in zip(parts, predicted):
            part.append(np.asarray(p).reshape(len(chunk[0]), -1))
    return [np.concatenate(part) for part in parts]


def _arrow_output(kind: str, values: Any) -> Any:
    """An Arrow array of :func:`udf_type`'s type for one output of ``kind`` from ``values`` (rows, n)."""
    import numpy as np
    import pyarrow as pa

    rows, width = values.shape
    if kind == "scalar":
        return pa.array(values[:, 0].astype(np.float64))
    offsets = pa.array(np.arange(0, (rows + 1) * width, width, dtype=np.int32))
    flat = values.reshape(-1).astype(np.float32 if kind == "array" else np.float64)
    return pa.ListArray.from_arrays(offsets, pa.array(flat))


def predict_arrow(columns: Sequence[Any], blob: bytes, custom_objects: Dict[str, Any], features: Sequence[str],
                  input_shapes: Sequence[Tuple[int, ...]], kinds: Sequence[str], batch_size: int) -> Any:
    """The scalar Arrow UDF's body (pyspark 4.1 and newer): one Arrow array per feature column in, the predictions
    out (:func:`udf_type`).

    Args:
        columns: the feature columns of one Arrow batch (:func:`feature_column`).
        blob: the model's Keras file; custom_objects: Keras' custom objects for loading it.
        features: the feature columns' names, for the one-line error.
        input_shapes: each input's shape without the batch (-1 for an unknown size).
        kinds: each output column's kind (:func:`output_kinds`).
        batch_size: rows per ``predict_on_batch``.
    """
    import pyarrow as pa

    inputs = [_feature(column, name, shape) for column, name, shape in zip(columns, features, input_shapes)]
    outputs = [_arrow_output(kind, values)
               for kind, values in zip(kinds, predict_matrices(inputs, blob, custom_objects, batch_size))]
    if len(kinds) == 1:
        return outputs[0]
    return pa.StructArray.from_arrays(outputs, names=[f"o{i}" for i in range(len(kinds))])


def predict_pandas(columns: Sequence[Any], blob: bytes, custom_objects: Dict[str, Any], features: Sequence[str],
                   input_shapes: Sequence[Tuple[int, ...]], kinds: Sequence[str], batch_size: int) -> Any:
    """The scalar pandas UDF's body (pyspark before 4.1): :func:`predict_arrow`'s, on pandas Series."""
    import pandas as pd  # type: ignore[import-untyped]
    import pyarrow as pa

    arrow = [pa.Array.from_pandas(column) for column in columns]
    predicted = predict_arrow(arrow, blob, custom_objects, features, input_shapes, kinds, batch_size)
    if len(kinds) == 1:
        return _as_series(predicted, kinds[0])
    return pd.DataFrame({f"o{i}": _as_series(predicted.field(i), kind) for i, kind in enumerate(kinds)})


def _as_series(array: Any, kind: str) -> Any:
    """A pandas Series of one output's Arrow array: numbers, or one NumPy array a row."""
    import pandas as pd

    if kind == "scalar":
        return pd.Series(array.to_numpy(zero_copy_only=False))
    rows = len(array)
    values = array.flatten().to_numpy(zero_copy_only=False)
    return pd.Series(list(values.reshape(rows, -1)) if rows else [], dtype=object)
