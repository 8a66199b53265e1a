"""A fitted model's ``transform``: predictions on Arrow batches in Spark's Python workers, the model loaded once per
worker.

:func:`output_kinds` decides each output column's type on the driver; :func:`predict_batches` runs in the
workers (``DataFrame.mapInArrow``): it reads the feature columns of each Arrow record batch as NumPy arrays
(a ``DenseVector`` or ``SparseVector`` column, an array column or a number), predicts ``batch_size`` rows at a
time, and appends one column per output. The model comes from a broadcast of its Keras file and stays loaded
in the worker (Spark reuses its Python workers) for every later partition and ``transform`` of the same model.
"""
from __future__ import annotations

import hashlib
import math
import os
import sys
from typing import Any, Dict, Iterator, List, Sequence, Tuple

from hvdkeras.common.errors import SetupError

# Spark ML's VectorUDT in Arrow: type 0 sparse (size, indices, values), 1 dense (values).
_VECTOR_DENSE = 1
_MODELS: Dict[str, Any] = {}  # this worker's loaded models, by their Keras file's SHA-256


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


def spark_type(kind: str) -> Any:
    """The Spark SQL type of an output column of ``kind``."""
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql.types import ArrayType, DoubleType, FloatType

    return {"scalar": DoubleType(), "array": ArrayType(FloatType()), "vector": VectorUDT()}[kind]


def _as_matrix(column: Any, shape: Tuple[int, ...]) -> Any:
    """An Arrow column of a record batch as a float32 array of ``(rows, *shape)``."""
    import numpy as np
    import pyarrow as pa

    rows = len(column)
    if pa.types.is_struct(column.type):  # a Spark ML vector
        parts = {field.name: part for field, part in zip(column.type, column.flatten())}
        kinds = parts["type"].to_numpy(zero_copy_only=False)
        values = parts["values"]
        if (kinds == _VECTOR_DENSE).all():
            flat = values.flatten().to_numpy(zero_copy_only=False)
            return flat.astype(np.float32).reshape((rows, *shape))
        sizes = parts["size"].to_pylist()
        indices, listed = parts["indices"].to_pylist(), values.to_pylist()
        width = max((s or 0 for s in sizes), default=0) or int(np.prod([d for d in shape if d > 0]) or 1)
        dense = np.zeros((rows, width), dtype=np.float32)
        for i in range(rows):
            if kinds[i] == _VECTOR_DENSE:
                dense[i, :len(listed[i])] = listed[i]
            else:
                dense[i, indices[i]] = listed[i]
        return dense.reshape((rows, *shape))
    if pa.types.is_list(column.type) or pa.types.is_large_list(column.type) or \
            pa.types.is_fixed_size_list(column.type):
        flat = column.flatten().to_numpy(zero_copy_only=False)
        return flat.astype(np.float32).reshape((rows, *shape))
    return column.to_numpy(zero_copy_only=False).astype(np.float32).reshape((rows, *shape))


def _feature(batch: Any, name: str, shape: Tuple[int, ...]) -> Any:
    """Column ``name`` of ``batch`` as the model's input of ``shape``; one line when its rows do not fit it."""
    try:
        return _as_matrix(batch.column(name), shape)
    except (ValueError, IndexError):
        need = math.prod(d for d in shape if d > 0)
        raise SetupError(f"feature column {name!r} holds rows that do not fit the model's input shape {shape}: every"
                         f" row must hold {need} values{' (or a multiple)' if -1 in shape else ''}; fix or drop those"
                         " rows before transform()") from None


def _output_array(kind: str, values: Any) -> Any:
    """An Arrow column of ``kind`` from ``values`` (rows, n)."""
    import numpy as np
    import pyarrow as pa

    rows, width = values.shape
    if kind == "scalar":
        return pa.array(values[:, 0].astype(np.float64))
    offsets = pa.array(np.arange(0, (rows + 1) * width, width, dtype=np.int32))
    if kind == "array":
        return pa.ListArray.from_arrays(offsets, pa.array(values.reshape(-1).astype(np.float32)))
    listed = pa.ListArray.from_arrays(offsets, pa.array(values.reshape(-1).astype(np.float64)))
    return pa.StructArray.from_arrays(
        [pa.array(np.full(rows, _VECTOR_DENSE, dtype=np.int8)), pa.nulls(rows, pa.int32()),
         pa.nulls(rows, pa.list_(pa.int32())), listed], names=["type", "size", "indices", "values"])


def _use_the_tasks_gpu() -> None:
    """Before TensorFlow is imported in this worker: where Spark assigned this task a GPU, TensorFlow sees that one."""
    if "tensorflow" in sys.modules:
        return
    from pyspark import TaskContext

    from hvdkeras.spark.common import gpus

    context = TaskContext.get()
    assigned = context.resources().get("gpu") if context is not None else None
    gpus.choose(True, [str(a) for a in assigned.addresses] if assigned is not None else [], os.environ)


def _model(blob: bytes, custom_objects: Dict[str, Any]) -> Any:
    """The model of Keras file ``blob``, loaded once in this worker."""
    digest = hashlib.sha256(blob).hexdigest()
    if digest not in _MODELS:
        _use_the_tasks_gpu()
        from hvdkeras.runtime import tensorflow_import

        tensorflow_import.load()  # as the command lines import it: quiet, matplotlib at its first use
        from hvdkeras.spark.keras.serialization import model_from_bytes

        _MODELS.clear()  # one model at a time per worker: a new model replaces the last
        _MODELS[digest] = model_from_bytes(blob, custom_objects)
    return _MODELS[digest]


def predict_batches(batches: Iterator[Any], blob: bytes, custom_objects: Dict[str, Any], features: Sequence[str],
                    input_shapes: Sequence[Tuple[int, ...]], kinds: Sequence[str], names: Sequence[str],
                    batch_size: int) -> Iterator[Any]:
    """Each Arrow record batch with one prediction column per output appended (runs in Spark's Python workers).

    Args:
        batches: the partition's Arrow record batches.
        blob: the model's Keras file.
        custom_objects: Keras' custom objects for loading it.
        features: the feature columns, one per model input.
        input_shapes: each input's shape without the batch (-1 for an unknown size).
        kinds: each output column's kind (:func:`output_kinds`).
        names: the output columns' names.
        batch_size: rows per ``predict_on_batch``.
    """
    import numpy as np
    import pyarrow as pa

    model = None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        if model is None:
            model = _model(blob, custom_objects)
        inputs = [_feature(batch, name, shape) for name, shape in zip(features, input_shapes)]
        parts: List[List[Any]] = [[] for _ in kinds]
        for start in range(0, batch.num_rows, batch_size):
            chunk = [x[start:start + batch_size] for x in inputs]
            predicted = model.predict_on_batch(chunk[0] if len(chunk) == 1 else chunk)
            predicted = predicted if isinstance(predicted, (list, tuple)) else [predicted]
            for part, p in zip(parts, predicted):
                part.append(np.asarray(p).reshape(len(chunk[0]), -1))
        columns = [_output_array(kind, np.concatenate(part)) for kind, part in zip(kinds, parts)]
        yield pa.RecordBatch.from_arrays(list(batch.columns) + columns,
                                         names=list(batch.schema.names) + list(names))
