"""hvdkeras.spark.keras.transform: the UDF's Arrow (or pandas) columns in, predictions out, the model loaded once per
worker (no Spark; the DataFrame's side is tests/distributed/test_spark.py's)."""
import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from pyspark.ml.linalg import VectorUDT  # noqa: E402
from pyspark.sql.types import ArrayType, DoubleType, StructType  # noqa: E402

from hvdkeras.common.errors import SetupError  # noqa: E402
from hvdkeras.spark.common import versions  # noqa: E402
from hvdkeras.spark.keras import transform  # noqa: E402


def test_arrays_and_numbers_become_the_inputs_shape_as_float32():
    arrays = pa.array([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]], type=pa.list_(pa.float32()))
    assert transform._as_matrix(arrays, (2, 2)).tolist() == [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]
    assert transform._as_matrix(pa.array([[1.0, 2.0]]), (2,)).dtype == np.float32
    assert transform._as_matrix(pa.array([0.5, 1.5]), ()).tolist() == [0.5, 1.5]
    sliced = pa.array([[9.0, 9.0], [1.0, 2.0], [3.0, 4.0]]).slice(1)  # a batch that starts inside its buffers
    assert transform._as_matrix(sliced, (2,)).tolist() == [[1, 2], [3, 4]]


def test_outputs_are_a_double_a_float_array_or_a_dense_vector_as_the_label_column_was():
    assert transform.output_kinds([1, 3, 3], [DoubleType(), ArrayType(DoubleType()), VectorUDT()]) == \
        ["scalar", "array", "vector"]
    # the UDF returns a vector's values as array<double>: array_to_vector makes it a DenseVector in the JVM
    assert transform.udf_type(["vector"]) == ArrayType(DoubleType())
    several = transform.udf_type(["scalar", "array"])
    assert isinstance(several, StructType) and several.names == ["o0", "o1"]
    values = np.array([[0.25, 0.75], [0.5, 0.5]])
    assert transform._arrow_output("array", values).type == pa.list_(pa.float32())
    assert transform._arrow_output("vector", values).to_pylist() == [[0.25, 0.75], [0.5, 0.5]]
    assert transform._arrow_output("scalar", values[:, :1]).to_pylist() == [0.25, 0.5]


@pytest.fixture
def summing_model(monkeypatch):
    """A stand-in model (each row's sum, and the row doubled) and the record of its loads and calls."""
    record = {"loads": [], "calls": []}

    class Model:
        def predict_on_batch(self, x):
            record["calls"].append(len(x))
            return [x.sum(axis=1, keepdims=True), 2 * x]

    def model_from_bytes(blob, custom_objects, safe_mode=True):
        record["loads"].append(blob)
        return Model()

    from hvdkeras.spark.keras import serialization

    monkeypatch.setattr(serialization, "model_from_bytes", model_from_bytes)
    monkeypatch.setattr(transform, "_MODELS", {})
    monkeypatch.setattr(transform, "_LAST_BLOB", [None, ""])
    monkeypatch.setattr(transform, "_use_the_tasks_cpus", lambda: None)
    return record


def test_batches_are_predicted_in_chunks_with_the_model_loaded_once(summing_model):
    column = pa.array([[1.0, 2.0]] * 5)
    for _ in range(2):  # two Arrow batches in the same worker
        out = transform.predict_arrow([column], b"model", {}, ["x"], [(2,)], ["scalar", "vector"], 2)
        assert out.type.names == ["o0", "o1"]
        assert out.field(0).to_pylist() == [3.0] * 5 and out.field(1).to_pylist() == [[2.0, 4.0]] * 5
    assert summing_model["loads"] == [b"model"] and summing_model["calls"] == [2, 2, 1, 2, 2, 1]


def test_the_pandas_udf_predicts_as_the_arrow_one(summing_model):
    pd = pytest.importorskip("pandas")
    series = pd.Series([np.array([1.0, 2.0]), np.array([3.0, 4.0])])
    out = transform.predict_pandas([series], b"model", {}, ["x"], [(2,)], ["scalar", "array"], 8)
    assert list(out.columns) == ["o0", "o1"] and out["o0"].tolist() == [3.0, 7.0]
    assert [list(v) for v in out["o1"]] == [[2.0, 4.0], [6.0, 8.0]]
    single = transform.predict_pandas([series], b"model", {}, ["x"], [(2,)], ["scalar"], 8)
    assert single.tolist() == [3.0, 7.0]


def test_rows_that_do_not_fit_the_input_are_one_line_naming_the_column():
    uneven = pa.array([[1.0, 2.0], [3.0]])
    with pytest.raises(SetupError, match=r"^feature column 'x' holds rows that do not fit the model's input shape"
                                         r" \(2,\): every row must hold 2 values; fix or drop those rows"):
        transform._feature(uneven, "x", (2,))
    assert transform._feature(pa.array([[1.0, 2.0]]), "x", (2,)).tolist() == [[1, 2]]


def test_the_udf_is_arrow_where_pyspark_has_arrow_udfs_else_pandas_and_runs_once_a_row():
    from pyspark.rdd import PythonEvalType
    from pyspark.sql import functions

    made = versions.vectorized_udf(lambda *c: c[0], lambda *c: c[0], DoubleType())
    expected = PythonEvalType.SQL_SCALAR_ARROW_UDF if hasattr(functions, "arrow_udf") else \
        PythonEvalType.SQL_SCALAR_PANDAS_UDF
    assert made.evalType == expected and made.deterministic is False


def keras_file(saved_at, weights=b"weights"):
    """The bytes of a ``.keras`` archive as Keras writes it: its time of saving in ``metadata.json``."""
    import io
    import json
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("metadata.json", json.dumps({"keras_version": "3", "date_saved": saved_at}))
        archive.writestr("config.json", json.dumps({"class_name": "Sequential"}))
        archive.writestr("model.weights.h5", weights)
    return out.getvalue()


def test_the_same_model_saved_again_is_the_same_model_and_other_weights_are_not():
    first, again = keras_file("2026-12-03@13:27:44"), keras_file("2026-12-03@13:27:45")
    assert first != again
    assert transform.model_digest(first) == transform.model_digest(again)
    assert transform.model_digest(keras_file("2026-12-03@13:27:44", b"other")) != transform.model_digest(first)
    assert transform.model_digest(b"an H5 file") == transform.model_digest(b"an H5 file") != \
        transform.model_digest(b"another")


def test_a_later_transform_of_the_same_model_does_not_load_it_again(summing_model):
    column = pa.array([[1.0, 2.0]] * 3)
    for saved_at in ("2026-12-03@13:27:44", "2026-12-03@13:27:45"):  # each transform saves the model again
        transform.predict_arrow([column], keras_file(saved_at), {}, ["x"], [(2,)], ["scalar", "vector"], 4)
    assert len(summing_model["loads"]) == 1
    transform.predict_arrow([column], keras_file("2026-12-03@13:28:00", b"trained on"), {}, ["x"], [(2,)],
                            ["scalar", "vector"], 4)
    assert len(summing_model["loads"]) == 2  # other weights: loaded
