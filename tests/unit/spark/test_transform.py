"""hvdkeras.spark.keras.transform: Arrow columns in, predictions out, the model loaded once per worker (no Spark)."""
import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from pyspark.ml.linalg import VectorUDT  # noqa: E402
from pyspark.sql.types import ArrayType, DoubleType, FloatType  # noqa: E402

from hvdkeras.spark.keras import transform  # noqa: E402

VECTOR = pa.struct([pa.field("type", pa.int8(), nullable=False), pa.field("size", pa.int32()),
                    pa.field("indices", pa.list_(pa.int32())), pa.field("values", pa.list_(pa.float64()))])


def test_dense_and_sparse_vectors_arrays_and_numbers_become_the_inputs_shape():
    dense = pa.array([{"type": 1, "size": None, "indices": None, "values": [1.0, 2.0, 3.0, 4.0]},
                      {"type": 1, "size": None, "indices": None, "values": [5.0, 6.0, 7.0, 8.0]}], type=VECTOR)
    assert transform._as_matrix(dense, (2, 2)).tolist() == [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]
    mixed = pa.array([{"type": 0, "size": 4, "indices": [1, 3], "values": [2.0, 9.0]},
                      {"type": 1, "size": None, "indices": None, "values": [1.0, 0.0, 0.0, 1.0]}], type=VECTOR)
    assert transform._as_matrix(mixed, (4,)).tolist() == [[0, 2, 0, 9], [1, 0, 0, 1]]
    arrays = pa.array([[1.0, 2.0], [3.0, 4.0]], type=pa.list_(pa.float32()))
    assert transform._as_matrix(arrays, (2,)).dtype == np.float32
    assert transform._as_matrix(pa.array([0.5, 1.5]), ()).tolist() == [0.5, 1.5]
    sliced = pa.array([[9.0, 9.0], [1.0, 2.0], [3.0, 4.0]]).slice(1)  # a batch that starts inside its buffers
    assert transform._as_matrix(sliced, (2,)).tolist() == [[1, 2], [3, 4]]


def test_outputs_are_a_double_a_float_array_or_a_dense_vector_as_the_label_column_was():
    assert transform.output_kinds([1, 3, 3], [DoubleType(), ArrayType(DoubleType()), VectorUDT()]) == \
        ["scalar", "array", "vector"]
    assert transform.spark_type("array") == ArrayType(FloatType())
    values = np.array([[0.25, 0.75], [0.5, 0.5]])
    assert transform._output_array("array", values).to_pylist() == [[0.25, 0.75], [0.5, 0.5]]
    vector = transform._output_array("vector", values).to_pylist()
    assert vector == [{"type": 1, "size": None, "indices": None, "values": [0.25, 0.75]},
                      {"type": 1, "size": None, "indices": None, "values": [0.5, 0.5]}]
    assert transform._output_array("scalar", values[:, :1]).to_pylist() == [0.25, 0.5]


def test_batches_are_predicted_in_chunks_with_the_model_loaded_once(monkeypatch):
    loads, calls = [], []

    class Model:
        def predict_on_batch(self, x):
            calls.append(len(x))
            return x.sum(axis=1, keepdims=True)

    def model_from_bytes(blob, custom_objects, safe_mode=True):
        loads.append(blob)
        return Model()

    from hvdkeras.spark.keras import serialization

    monkeypatch.setattr(serialization, "model_from_bytes", model_from_bytes)
    monkeypatch.setattr(transform, "_MODELS", {})
    batch = pa.RecordBatch.from_arrays([pa.array([[1.0, 2.0]] * 5), pa.array(range(5))], names=["x", "id"])
    for _ in range(2):  # two partitions in the same worker
        (out,) = transform.predict_batches(iter([batch]), b"model", {}, ["x"], [(2,)], ["scalar"], ["pred"], 2)
        assert out.schema.names == ["x", "id", "pred"] and out.column(2).to_pylist() == [3.0] * 5
    assert loads == [b"model"] and calls == [2, 2, 1, 2, 2, 1]


def test_rows_that_do_not_fit_the_input_are_one_line_naming_the_column():
    from hvdkeras.common.errors import SetupError

    uneven = pa.RecordBatch.from_arrays([pa.array([[1.0, 2.0], [3.0]])], names=["x"])
    with pytest.raises(SetupError, match=r"^feature column 'x' holds rows that do not fit the model's input shape"
                                         r" \(2,\): every row must hold 2 values; fix or drop those rows"):
        transform._feature(uneven, "x", (2,))
    sparse = pa.array([{"type": 0, "size": 2, "indices": [5], "values": [1.0]}], type=VECTOR)  # index past the size
    with pytest.raises(SetupError, match=r"^feature column 'v' holds rows that do not fit"):
        transform._feature(pa.RecordBatch.from_arrays([sparse], names=["v"]), "v", (2,))
    assert transform._feature(pa.RecordBatch.from_arrays([pa.array([[1.0, 2.0]])], names=["x"]), "x",
                              (2,)).tolist() == [[1, 2]]
