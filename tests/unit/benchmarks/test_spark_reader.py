"""benchmarks.spark_reader: the store it writes is read back by the estimator's reader, row for row."""
import numpy as np
import pytest

pytest.importorskip("pyarrow")

from benchmarks.spark_reader import write_store  # noqa: E402
from hvdkeras.spark.common.reader import read_rows  # noqa: E402


def test_the_written_store_reads_back_every_row_in_order(tmp_path):
    x = np.arange(5 * 4, dtype=np.float32).reshape(5, 2, 2, 1)
    y = np.arange(5, dtype=np.int32)
    store, path = write_store(str(tmp_path), x, y, files=3)
    rows = read_rows(store, path, 0, 1, ["features", "label"])
    assert rows["features"].shape == (5, 4)
    np.testing.assert_array_equal(rows["features"].reshape(x.shape), x)
    np.testing.assert_array_equal(rows["label"], y)
