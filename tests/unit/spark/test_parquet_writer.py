"""hvdkeras.spark.common.parquet_writer: one partition's rows to one Parquet file, in order (no Spark needed)."""
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from hvdkeras.spark.common import parquet_writer

SCHEMA = pa.schema([("features", pa.list_(pa.float32())), ("label", pa.int32())])


@pytest.fixture
def folder():
    fs, where = MemoryFileSystem(), f"/hvdkeras-parquet-{uuid.uuid4().hex}"
    fs.makedirs(where, exist_ok=True)
    yield fs, where
    fs.rm(where, recursive=True)


def test_a_partitions_rows_land_in_its_file_in_order_in_row_groups(folder, monkeypatch):
    fs, where = folder
    monkeypatch.setattr(parquet_writer, "CHUNK", 2)
    rows = [([float(i), i + 0.5], i) for i in range(5)]
    assert list(parquet_writer._write_partition(fs, where, SCHEMA, 3, iter(rows))) == [(3, 5)]
    assert parquet_writer.file_name(where, 3) == f"{where}/part-00003.parquet"
    with fs.open(f"{where}/part-00003.parquet", "rb") as f:
        read = pq.ParquetFile(f)
        assert read.metadata.num_row_groups == 3 and read.schema_arrow.equals(SCHEMA)
        assert read.read().to_pydict() == {"features": [r[0] for r in rows], "label": [r[1] for r in rows]}


def test_an_empty_partition_writes_the_schema_and_no_rows(folder):
    fs, where = folder
    assert list(parquet_writer._write_partition(fs, where, SCHEMA, 0, iter([]))) == [(0, 0)]
    with fs.open(f"{where}/part-00000.parquet", "rb") as f:
        read = pq.ParquetFile(f)
        assert read.metadata.num_rows == 0 and read.schema_arrow.equals(SCHEMA)


def test_the_files_sorted_order_is_the_partitions_order():
    names = [parquet_writer.file_name("s/d", p) for p in (10, 2, 100, 0)]
    assert sorted(names) == [parquet_writer.file_name("s/d", p) for p in (0, 2, 10, 100)]


def test_through_spark_connect_arrow_batches_of_any_size_land_in_the_same_row_groups_as_rows_do(folder, monkeypatch):
    # mapInArrow's batches (Spark's own sizes, its own nullability) are written as a classic task's rows are
    fs, where = folder
    monkeypatch.setattr(parquet_writer, "CHUNK", 4)
    rows = [([float(i), i + 0.5], i) for i in range(10)]
    list(parquet_writer._write_partition(fs, where, SCHEMA, 0, iter(rows)))
    loose = pa.schema([pa.field("features", pa.list_(pa.float32()), nullable=False), ("label", pa.int32())])
    table = pa.table({"features": [r[0] for r in rows], "label": [r[1] for r in rows]}, schema=loose)
    batches = [table.slice(0, 3).to_batches()[0], table.slice(3, 6).to_batches()[0], table.slice(9).to_batches()[0]]
    written = parquet_writer._write_batches(fs, parquet_writer.file_name(where, 1), SCHEMA, iter(batches))
    assert written == 10
    files = [pq.ParquetFile(fs.open(parquet_writer.file_name(where, part), "rb")) for part in (0, 1)]
    assert [f.metadata.num_row_groups for f in files] == [3, 3]
    assert [[f.metadata.row_group(g).num_rows for g in range(3)] for f in files] == [[4, 4, 2]] * 2
    assert files[0].read().equals(files[1].read())
    assert parquet_writer._write_batches(fs, parquet_writer.file_name(where, 2), SCHEMA, iter(())) == 0
    empty = pq.ParquetFile(fs.open(parquet_writer.file_name(where, 2), "rb"))
    assert empty.metadata.num_rows == 0 and empty.schema_arrow.equals(SCHEMA)
