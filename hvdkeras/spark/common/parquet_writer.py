"""A DataFrame's partitions written to Parquet from Python, each by its executor, with pyarrow through fsspec.

Spark's own writer (``df.write.parquet``) goes through Hadoop's filesystems, which reach an
object store only with connector jars on the classpath. :func:`write_folders` needs only the store's
fsspec filesystem: each Spark task writes its partition as one file,
``<path>/part-<partition, five digits>.parquet``, so the files' sorted order is the
partitions' order and the rows of each file are in the partition's order. Every partition
writes a file, an empty one too (it holds the schema and no rows), so a folder holds exactly
as many files as the DataFrame has partitions. Files of an earlier write are removed first.
No TensorFlow here.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator, List, Optional, Sequence, Tuple

from hvdkeras.common.errors import SetupError
from hvdkeras.spark.common.store import FilesystemStore

CHUNK = 8192  # rows per row group: what a task holds as Python values at once


def file_name(folder: str, partition: int) -> str:
    """The file partition ``partition`` is written to in ``folder`` (its sorted place is the partition's)."""
    return f"{folder}/part-{partition:05d}.parquet"


def _write_partition(fs: Any, folder: str, schema: Any, part: int, rows: Iterable[Any]) -> Iterator[Tuple[int, int]]:
    """Writes one partition's rows (Spark ``Row``s, in ``schema``'s column order) to its file in ``folder``, in
    row groups of :data:`CHUNK` rows; yields ``(part, rows written)``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def table(chunk: List[Any]) -> Any:
        columns = list(zip(*chunk)) if chunk else [()] * len(schema)
        return pa.Table.from_arrays([pa.array(list(c), type=f.type) for c, f in zip(columns, schema)], schema=schema)

    written = 0
    with fs.open(file_name(folder, part), "wb") as f, pq.ParquetWriter(f, schema) as writer:
        chunk: List[Any] = []
        for row in rows:
            chunk.append(row)
            if len(chunk) == CHUNK:
                writer.write_table(table(chunk))
                written, chunk = written + len(chunk), []
        if chunk or not written:  # an empty partition: the schema, no rows
            writer.write_table(table(chunk))
            written += len(chunk)
    yield part, written


def _write_batches(fs: Any, path: str, schema: Any, batches: Iterable[Any]) -> int:
    """Writes Arrow record batches to the Parquet file ``path``, in row groups of :data:`CHUNK` rows as
    :func:`_write_partition` makes them; the rows written (an empty file holds the schema)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    written, pending = 0, 0
    held: List[Any] = []
    with fs.open(path, "wb") as f, pq.ParquetWriter(f, schema) as writer:
        def flush(rows: int) -> None:
            nonlocal held, pending, written
            table = pa.Table.from_batches(held, schema=schema) if held else schema.empty_table()
            writer.write_table(table.slice(0, rows), row_group_size=CHUNK)
            rest = table.slice(rows)
            held, pending, written = rest.to_batches(), rest.num_rows, written + rows

        for batch in batches:
            held.append(batch.cast(schema) if batch.schema != schema else batch)
            pending += batch.num_rows
            while pending >= CHUNK:
                flush(CHUNK)
        if pending or not written:
            flush(pending)
    return written


def _write_through_connect(fs: Any, folders: List[str], schema: Any, starts: List[int], union: Any) -> List[
        Tuple[int, int]]:
    """Each partition of ``union`` to its folder's file, with ``mapInArrow`` (a Spark Connect session has no RDDs):
    ``(partition, rows written)`` for each."""

    def write(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None  # in a Spark task
        index = context.partitionId()
        which = max(i for i, start in enumerate(starts) if start <= index)
        rows = _write_batches(fs, file_name(folders[which], index - starts[which]), schema, batches)
        yield pa.RecordBatch.from_pylist([{"index": index, "rows": rows}])

    return sorted((int(row["index"]), int(row["rows"])) for row in union.mapInArrow(write, "index long, rows long")
                  .collect())


def write_folders(store: FilesystemStore, parts: Sequence[Tuple[str, Any]],
                  partitions: Optional[Sequence[int]] = None) -> List[Tuple[int, int]]:
    """Writes each ``(path, df)`` of ``parts`` to the Parquet folder ``path`` of ``store``, one file per partition of
    ``df``, replacing what was there; all in one Spark job.

    The DataFrames must have the same columns (a fit's training and validation rows). Their partitions are
    written in one stage of their union: one job's start, and one pass over what they are computed from.

    Args:
        store: the store (its filesystem travels to the executors with its options).
        parts: each folder (a store URL) and the DataFrame whose partitions go there, in the partitions and row
            order its files must have; numbers and arrays of numbers.
        partitions: how many partitions each DataFrame has (the caller's ``repartition(n)``): what a Spark Connect
            DataFrame's writer goes by, whose client cannot ask; a classic one's asks its RDD.

    Returns:
        (files written, rows written) for each folder, in order.

    Raises:
        SetupError: the tasks did not report each partition once.
    """
    import functools

    from pyspark.sql.pandas.types import to_arrow_schema

    fs = store.fs
    folders = [store.get_localized_path(path).rstrip("/") for path, _ in parts]
    for folder in folders:
        if fs.exists(folder):
            fs.rm(folder, recursive=True)
        fs.makedirs(folder, exist_ok=True)
    schema = to_arrow_schema(parts[0][1].schema)
    from hvdkeras.spark.common.connect import is_connect

    through_connect = is_connect(parts[0][1])
    if through_connect:
        if partitions is None:
            raise SetupError("writing a Spark Connect DataFrame needs its partitions counted by the caller")
        counts = list(partitions)
    else:
        counts = [df.rdd.getNumPartitions() for _, df in parts]
    starts = [sum(counts[:i]) for i in range(len(counts))]

    def write_partition(index: int, rows: Iterable[Any]) -> Iterator[Tuple[int, int]]:
        which = max(i for i, start in enumerate(starts) if start <= index)
        for _, written in _write_partition(fs, folders[which], schema, index - starts[which], rows):
            yield index, written

    union = functools.reduce(lambda a, b: a.union(b), [df for _, df in parts])
    if through_connect:
        written = _write_through_connect(fs, folders, schema, starts, union)
    else:
        written = sorted(union.rdd.mapPartitionsWithIndex(write_partition).collect())
    for folder in folders:
        fs.invalidate_cache(folder)
    if [index for index, _ in written] != list(range(sum(counts))):  # one file per partition, each once
        raise SetupError(f"writing {', '.join(path for path, _ in parts)} reported partitions"
                         f" {[index for index, _ in written]}, not each of 0 to {sum(counts) - 1} once; fit again")
    return [(count, sum(rows for index, rows in written if start <= index < start + count))
            for start, count in zip(starts, counts)]
