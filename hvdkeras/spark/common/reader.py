"""A rank's own rows of a Parquet folder in the store, as NumPy arrays (pyarrow; no petastorm, no TensorFlow).

The rows of a folder are numbered in the order of its sorted ``.parquet`` files; rank
``r`` of ``n`` reads rows ``[r * N // n, (r + 1) * N // n)``. The parts are disjoint,
cover every row, and differ in size by at most one, and a rank opens only the files its
rows are in. Array columns come back as ``(rows, values)`` arrays, scalar columns as
``(rows,)``.

:func:`read_rows` reads a rank's rows at once; :func:`stream_rows` yields them in the same
order, a bounded chunk at a time, reading one row group after another, so that what a rank
holds does not grow with its rows.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

import numpy as np

from hvdkeras.common.errors import SetupError
from hvdkeras.spark.common.store import FilesystemStore


def parquet_files(store: FilesystemStore, path: str) -> List[Tuple[str, int]]:
    """``(file, rows)`` of each ``.parquet`` file in the folder ``path``, sorted by name.

    Raises:
        SetupError: the folder holds no Parquet file.
    """
    import pyarrow.parquet as pq

    where = store.get_localized_path(path)
    names = sorted(str(n) for n in store.fs.ls(where, detail=False) if str(n).endswith(".parquet"))
    if not names:
        raise SetupError(f"{path} holds no Parquet files: prepare the data again (fit() writes it)")
    files = []
    for name in names:
        with store.fs.open(name, "rb") as f:
            files.append((name, pq.ParquetFile(f).metadata.num_rows))
    return files


def count_rows(store: FilesystemStore, path: str) -> int:
    """The rows of the Parquet folder ``path``, from the files' footers."""
    return sum(rows for _, rows in parquet_files(store, path))


def rank_range(total: int, rank: int, size: int) -> Tuple[int, int]:
    """``[start, stop)`` of rank ``rank``'s rows among ``total`` on ``size`` ranks."""
    return rank * total // size, (rank + 1) * total // size


def _overlaps(counts: List[int], start: int, stop: int) -> Iterator[Tuple[int, int, int]]:
    """The parts that rows ``[start, stop)`` take of consecutive parts of ``counts`` rows each (files, row groups):
    ``(part, offset in it, rows)`` for each part they reach, in order."""
    first = 0
    for index, rows in enumerate(counts):
        lo, hi = max(start, first), min(stop, first + rows)
        if lo < hi:
            yield index, lo - first, hi - lo
        first += rows


def _to_numpy(column: Any) -> np.ndarray:
    import pyarrow as pa

    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
        if column.null_count:
            raise SetupError("an array column holds nulls: drop or fill those rows before fit()")
        rows = len(column)
        values = column.flatten().to_numpy(zero_copy_only=False)
        return values.reshape(rows, -1) if rows else values.reshape(0, 0)
    if column.null_count:
        raise SetupError("a column holds nulls: drop or fill those rows before fit()")
    return column.to_numpy(zero_copy_only=False)


CHUNK_ROWS = 1024  # rows a stream yields at a time (a row group of the estimator's own files is 8192)


def stream_rows(store: FilesystemStore, path: str, rank: int, size: int, columns: Iterable[str],
                chunk_rows: int = CHUNK_ROWS,
                files: Optional[List[Tuple[str, int]]] = None) -> Iterator[Dict[str, np.ndarray]]:
    """Rank ``rank``'s rows of ``columns`` in the Parquet folder ``path``, in :func:`read_rows`'s order, at most
    ``chunk_rows`` at a time; one row group is read at a time, so what this holds is a row group and a chunk.

    Args:
        store: the store holding the folder.
        path: the folder (a store URL).
        rank: this rank.
        size: the number of ranks.
        columns: the columns to read.
        chunk_rows: the most rows a chunk holds.
        files: :func:`parquet_files` of the folder, if known (they are listed again otherwise).

    Returns:
        An iterator of ``{column: array}`` chunks, each of 1 to ``chunk_rows`` rows.
    """
    import pyarrow.parquet as pq

    columns = list(columns)
    files = parquet_files(store, path) if files is None else files
    start, stop = rank_range(sum(rows for _, rows in files), rank, size)
    for index, offset, count in _overlaps([rows for _, rows in files], start, stop):
        with store.fs.open(files[index][0], "rb") as f:
            parquet = pq.ParquetFile(f)
            groups = [parquet.metadata.row_group(g).num_rows for g in range(parquet.num_row_groups)]
            for group, group_offset, group_count in _overlaps(groups, offset, offset + count):
                at = 0  # this group's rows before the batch
                for batch in parquet.iter_batches(batch_size=chunk_rows, row_groups=[group], columns=columns,
                                                  use_threads=False):
                    lo, hi = max(group_offset, at), min(group_offset + group_count, at + batch.num_rows)
                    if lo < hi:
                        part = batch.slice(lo - at, hi - lo)
                        yield {c: _to_numpy(part.column(part.schema.get_field_index(c))) for c in columns}
                    at += batch.num_rows


def read_rows(store: FilesystemStore, path: str, rank: int, size: int, columns: Iterable[str]) -> Dict[str, np.ndarray]:
    """Rank ``rank``'s rows of ``columns`` in the Parquet folder ``path``, by column.

    Args:
        store: the store holding the folder.
        path: the folder (a store URL).
        rank: this rank.
        size: the number of ranks.
        columns: the columns to read.

    Returns:
        ``{column: array}``; arrays have one row per example.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = list(columns)
    files = parquet_files(store, path)
    start, stop = rank_range(sum(rows for _, rows in files), rank, size)
    tables = []
    for index, offset, count in _overlaps([rows for _, rows in files], start, stop):
        with store.fs.open(files[index][0], "rb") as f:
            tables.append(pq.read_table(f, columns=columns).slice(offset, count))
    table = pa.concat_tables(tables) if tables else None
    if table is None:
        return {c: np.zeros((0,)) for c in columns}
    return {c: _to_numpy(table.column(c)) for c in columns}
