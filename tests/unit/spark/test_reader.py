"""hvdkeras.spark.common.reader: each rank's own rows of a Parquet folder, disjoint, covering, balanced."""
import numpy as np
import pytest

from hvdkeras.common.errors import SetupError
from hvdkeras.spark.common.reader import count_rows, rank_range, read_rows, stream_rows
from hvdkeras.spark.common.store import Store

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture
def folder(tmp_path):
    """Three Parquet files of 4, 0 and 7 rows: ``id`` and a 3-value ``vec`` array per row."""
    where = tmp_path / "data"
    where.mkdir()
    start = 0
    for i, rows in enumerate([4, 0, 7]):
        ids = list(range(start, start + rows))
        table = pa.table({"id": pa.array(ids, pa.int64()),
                          "vec": pa.array([[float(n)] * 3 for n in ids], pa.list_(pa.float32()))})
        pq.write_table(table, str(where / f"part-{i:05d}.parquet"))
        start += rows
    (where / "_SUCCESS").write_text("")
    return Store.create(str(tmp_path)), "file://" + str(where)


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_the_ranks_rows_are_disjoint_cover_every_row_and_differ_by_at_most_one(folder, size):
    store, path = folder
    parts = [read_rows(store, path, rank, size, ["id", "vec"]) for rank in range(size)]
    ids = np.concatenate([p["id"] for p in parts])
    assert sorted(ids.tolist()) == list(range(11))
    lengths = [len(p["id"]) for p in parts]
    assert max(lengths) - min(lengths) <= 1


def test_array_columns_come_back_one_row_per_example(folder):
    store, path = folder
    rows = read_rows(store, path, 1, 2, ["vec", "id"])
    assert rows["vec"].shape == (6, 3) and rows["vec"].dtype == np.float32
    assert (rows["vec"][:, 0] == rows["id"]).all()


def test_rows_are_counted_from_the_footers(folder):
    store, path = folder
    assert count_rows(store, path) == 11
    assert [rank_range(11, r, 3) for r in range(3)] == [(0, 3), (3, 7), (7, 11)]


def test_a_folder_without_parquet_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SetupError, match="holds no Parquet files"):
        read_rows(Store.create(str(tmp_path)), "file://" + str(tmp_path / "empty"), 0, 1, ["id"])


@pytest.mark.parametrize("size", [1, 2, 3])
def test_a_stream_gives_the_ranks_rows_in_read_rows_order_a_bounded_chunk_at_a_time(tmp_path, size):
    # Files of several row groups (the estimator writes 8192 rows a group), chunks cut inside groups and files.
    where = tmp_path / "groups"
    where.mkdir()
    start = 0
    for i, rows in enumerate([50, 0, 120, 3]):
        ids = np.arange(start, start + rows)
        table = pa.table({"id": pa.array(ids, pa.int64()),
                          "vec": pa.array([[float(n), -float(n)] for n in ids], pa.list_(pa.float32()))})
        pq.write_table(table, str(where / f"part-{i:05d}.parquet"), row_group_size=16)
        start += rows
    store, path = Store.create(str(tmp_path)), "file://" + str(where)
    for rank in range(size):
        whole = read_rows(store, path, rank, size, ["id", "vec"])
        chunks = list(stream_rows(store, path, rank, size, ["id", "vec"], chunk_rows=7))
        assert max(len(c["id"]) for c in chunks) <= 7
        assert np.concatenate([c["id"] for c in chunks]).tolist() == whole["id"].tolist()
        assert (np.concatenate([c["vec"] for c in chunks]) == whole["vec"]).all()
